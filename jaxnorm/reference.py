"""The specification of every jaxnorm op, in plain jax.numpy.

Each jaxnorm function computes exactly these (up to floating-point rounding): statistics in
float32, or in the input's precision when that is wider (float64 under x64, as the tests use),
output cast back to the input's dtype. The test suite checks every backend against this module.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _axes(x, axis):
    return tuple(range(x.ndim)) if axis is None else axis


def _compute_dtype(x):
    return jnp.promote_types(x.dtype, jnp.float32)


def layer_norm(x, scale=None, bias=None, *, axis=-1, epsilon=1e-6):
    dt = _compute_dtype(x)
    xf = x.astype(dt)
    mean = jnp.mean(xf, axis=axis, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=axis, keepdims=True)
    y = (xf - mean) * jax.lax.rsqrt(var + epsilon)
    if scale is not None:
        y = y * scale.astype(dt)
    if bias is not None:
        y = y + bias.astype(dt)
    return y.astype(x.dtype)


def rms_norm(x, scale=None, *, axis=-1, epsilon=1e-6):
    dt = _compute_dtype(x)
    xf = x.astype(dt)
    ms = jnp.mean(jnp.square(xf), axis=axis, keepdims=True)
    y = xf * jax.lax.rsqrt(ms + epsilon)
    if scale is not None:
        y = y * scale.astype(dt)
    return y.astype(x.dtype)


def softmax(x, axis=-1, where=None):
    return jax.nn.softmax(x.astype(_compute_dtype(x)), axis=_axes(x, axis), where=where).astype(x.dtype)


def log_softmax(x, axis=-1, where=None):
    return jax.nn.log_softmax(x.astype(_compute_dtype(x)), axis=_axes(x, axis), where=where).astype(x.dtype)
