"""LayerNorm and RMSNorm."""

from __future__ import annotations

from functools import partial

import jax

from jaxnorm import _checks
from jaxnorm._ops import norm_bwd_p, norm_fwd_p
from jaxnorm._primitive import empty_placeholder
from jaxnorm._vma import vary_together


def layer_norm(x, scale=None, bias=None, *, axis=-1, epsilon=1e-6, memory_efficient=False):
    """Layer normalization over the trailing axes ``axis``, as one fused kernel.

    Equivalent to the following JAX code (``jaxnorm.reference.layer_norm``)::

        xf = x.astype(jnp.promote_types(x.dtype, jnp.float32))
        mean = jnp.mean(xf, axis, keepdims=True)
        var = jnp.mean(jnp.square(xf - mean), axis, keepdims=True)
        y = (xf - mean) * jax.lax.rsqrt(var + epsilon) * scale + bias
        return y.astype(x.dtype)

    Args:
      x: float32, bfloat16 or float16 array of any leading shape (size zero included).
      scale, bias: optional arrays shaped like the normalized axes ``x.shape[axis]``; any float
        dtype (float32 parameters with bfloat16 ``x`` are fine). Applied in float32.
      axis: an int or a tuple of *trailing* axes, normalized together over their product (like
        PyTorch's ``normalized_shape``).
      epsilon: added to the variance, a Python float.
      memory_efficient: apex's mode. The backward keeps the output ``y`` (which the next layer
        keeps anyway) instead of ``x`` and recovers ``x_hat = (y - bias) / scale``, with ``scale``
        clamped to magnitude >= ``epsilon``. Saves one activation per call; the gradients carry
        the rounding of ``y`` in ``x``'s dtype, amplified where ``|scale|`` is small.

    Returns:
      An array like ``x``. Differentiable in ``x``, ``scale`` and ``bias`` (reverse mode; the
      scale/bias gradients are reduced in a fixed order, bitwise reproducible); ``jit`` and
      ``vmap`` compose with it.
    """
    return normalize(x, scale, bias, axis, epsilon, memory_efficient, centered=True, fn="layer_norm")


def rms_norm(x, scale=None, *, axis=-1, epsilon=1e-6, memory_efficient=False):
    """Root-mean-square normalization over the trailing axes ``axis``, as one fused kernel.

    Equivalent to the following JAX code (``jaxnorm.reference.rms_norm``)::

        xf = x.astype(jnp.promote_types(x.dtype, jnp.float32))
        ms = jnp.mean(jnp.square(xf), axis, keepdims=True)
        return (xf * jax.lax.rsqrt(ms + epsilon) * scale).astype(x.dtype)

    Arguments as for :func:`layer_norm` (no bias). With ``memory_efficient=True`` the backward
    keeps ``y`` and recovers ``x_hat = y / scale``.
    """
    return normalize(x, scale, None, axis, epsilon, memory_efficient, centered=False, fn="rms_norm")


def normalize(x, scale, bias, axis, epsilon, memory_efficient, *, centered, fn):
    """Both norms, and the framework modules' (which name themselves in ``fn`` and may pass a bias
    with ``centered=False``: equinox's RMSNorm has one; the kernels add it either way)."""
    x = _checks.as_array(x, fn, "x")
    _checks.check_input_dtype(x, fn)
    k = _checks.trailing_axes(x.shape, axis, fn)
    norm_shape = tuple(x.shape[x.ndim - k :])
    rows, cols = _checks.rows_cols(x.shape, k)
    if cols == 0:
        raise ValueError(f"{fn}: cannot normalize over zero elements (normalized shape {norm_shape})")
    scale = _checks.check_param(scale, fn, "scale", norm_shape)
    bias = _checks.check_param(bias, fn, "bias", norm_shape)
    eps = _static_epsilon(epsilon, fn)
    if rows == 0:
        return x
    x, scale, bias = vary_together(x, scale, bias)
    y = _norm(x.reshape(rows, cols), scale, bias, eps, centered, bool(memory_efficient))
    return y.reshape(x.shape)


def _static_epsilon(epsilon, fn):
    try:
        eps = float(epsilon)
    except (TypeError, jax.errors.ConcretizationTypeError) as e:
        raise TypeError(f"{fn}: `epsilon` must be a Python float, got {type(epsilon).__name__}") from e
    if not eps >= 0.0:
        raise ValueError(f"{fn}: `epsilon` must be >= 0, got {epsilon!r}")
    return eps


def _or_empty(p):
    return empty_placeholder() if p is None else p


def _bind_fwd(x, scale, bias, eps, centered):
    return norm_fwd_p.bind(
        x, _or_empty(scale), _or_empty(bias),
        epsilon=eps, centered=centered, has_scale=scale is not None, has_bias=bias is not None,
    )


@partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _norm(x, scale, bias, eps, centered, memory_efficient):
    return _bind_fwd(x, scale, bias, eps, centered)[0]


def _norm_fwd(x, scale, bias, eps, centered, memory_efficient):
    y, mean, rstd = _bind_fwd(x, scale, bias, eps, centered)
    return y, residuals(x, y, mean, rstd, scale, bias, centered, memory_efficient)


def residuals(x, y, mean, rstd, scale, bias, centered, memory_efficient):
    """What the backward keeps alive: the input, or in memory-efficient mode the output."""
    return {
        "input": y if memory_efficient else x,
        "mean": mean if centered and not memory_efficient else None,
        "rstd": rstd,
        "scale": scale,
        "bias": bias,  # (C,) float32; its values are read only in memory-efficient mode
    }


def _norm_bwd(eps, centered, memory_efficient, res, dy):
    rstd, scale, bias = res["rstd"], res["scale"], res["bias"]
    mean = res["mean"] if res["mean"] is not None else rstd  # unread placeholder
    dx, dscale, dbias = norm_bwd_p.bind(
        res["input"], dy.astype(res["input"].dtype), mean, rstd, _or_empty(scale), _or_empty(bias),
        groups=1, epsilon=eps, centered=centered, has_scale=scale is not None,
        has_bias=bias is not None, memory_efficient=memory_efficient,
    )
    return dx, None if scale is None else dscale[0], None if bias is None else dbias[0]


_norm.defvjp(_norm_fwd, _norm_bwd)
