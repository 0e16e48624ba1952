"""Softmax and log-softmax with the one-pass online normalizer."""

from __future__ import annotations

import numpy as np

import jax.numpy as jnp
from jax.interpreters import ad

from jaxnorm import _checks
from jaxnorm._ops import softmax_bwd_p, softmax_fwd_p
from jaxnorm._primitive import define_jvp_by_formula, empty_placeholder, formula_primitive
from jaxnorm._partition import as_rows
from jaxnorm._vma import vary_together


def softmax(x, axis=-1, where=None):
    """Softmax, a drop-in for ``jax.nn.softmax``, as one fused kernel.

    Equivalent to (``jaxnorm.reference.softmax``)::

        jax.nn.softmax(x.astype(jnp.promote_types(x.dtype, jnp.float32)), axis, where).astype(x.dtype)

    The row statistics (max m, normalizer d = sum exp(x - m)) come from one pass with the
    online merge of (m, d); accumulation in float32. Masked positions (``where`` False) give 0;
    a fully masked row gives all zeros; a row that is all ``-inf`` gives NaN, like ``jax.nn``.
    Any ``+inf`` or NaN in a row makes the row NaN, like ``jax.nn``.

    Args:
      x: float32, bfloat16 or float16 array.
      axis: int, tuple of ints, or None (all axes). Trailing axes cost nothing extra; other axes
        are moved to the end (a transpose) and back.
      where: optional boolean mask broadcastable to ``x``.

    The backward uses only the output: ``dx = y * (dy - sum(dy * y))``.
    """
    return _softmax(x, axis, where, log=False, fn="softmax")


def log_softmax(x, axis=-1, where=None):
    """Log-softmax, a drop-in for ``jax.nn.log_softmax``, as one fused kernel.

    Equivalent to (``jaxnorm.reference.log_softmax``)::

        jax.nn.log_softmax(x.astype(jnp.promote_types(x.dtype, jnp.float32)), axis, where).astype(x.dtype)

    ``y = x - m - log(d)`` from the online (m, d) statistics. Masked positions give ``-inf`` (and
    a zero gradient). The backward uses only the output (and the mask):
    ``dx = dy - exp(y) * sum(dy)``.
    """
    return _softmax(x, axis, where, log=True, fn="log_softmax")


def _softmax(x, axis, where, *, log, fn):
    x = _checks.as_array(x, fn, "x")
    _checks.check_input_dtype(x, fn)
    axes = _checks.any_axes(x.shape, axis, fn)
    mask = None if where is None else _checks.check_where(where, x, fn)
    if x.size == 0:
        return x
    perm = [i for i in range(x.ndim) if i not in axes] + list(axes)
    moved = perm != list(range(x.ndim))
    if moved:
        x = jnp.transpose(x, perm)
        mask = None if mask is None else jnp.transpose(mask, perm)
    x, mask = vary_together(x, mask)
    # a scalar (axis=None) is one row of one column
    rows = (lambda a: a.reshape(1, 1)) if not axes else (lambda a: as_rows(a, len(axes)))
    y = _softmax_core(rows(x), None if mask is None else rows(mask), log)
    y = y.reshape(x.shape)
    return jnp.transpose(y, np.argsort(perm)) if moved else y


def _mask_operand(mask):
    return empty_placeholder(jnp.bool_) if mask is None else mask


def _softmax_core(x, mask, log):
    return softmax_fwd_p.bind(x, _mask_operand(mask), log=log, has_mask=mask is not None)[0]


# ---- derivatives ----
# As for the norms (jaxnorm/norm.py): the forward kernel's JVP is softmax_tangent_p, linear in
# dx, whose transpose is the backward kernel; it keeps only the output y (and the mask).


def _bwd_formula(y, dy, mask, *, log, has_mask):
    """The backward kernel's map (a symmetric Jacobian for softmax; for log-softmax the transpose
    of the tangent map below)."""
    yf, dyf = y.astype(jnp.float32), dy.astype(jnp.float32)
    if log:
        dyf = jnp.where(mask, dyf, 0.0) if has_mask else dyf
        dx = dyf - jnp.exp(yf) * jnp.sum(dyf, axis=1, keepdims=True)
    else:
        dx = yf * (dyf - jnp.sum(dyf * yf, axis=1, keepdims=True))
    dx = jnp.where(mask, dx, 0.0) if has_mask else dx
    return [dx.astype(y.dtype)]


def _tangent_formula(y, mask, dx, *, log, has_mask):
    yf, dxf = y.astype(jnp.float32), dx.astype(jnp.float32)
    dxf = jnp.where(mask, dxf, 0.0) if has_mask else dxf
    if log:
        dy = dxf - jnp.sum(jnp.exp(yf) * dxf, axis=1, keepdims=True)
    else:
        dy = yf * (dxf - jnp.sum(dxf * yf, axis=1, keepdims=True))
    dy = jnp.where(mask, dy, 0.0) if has_mask else dy
    return [dy.astype(y.dtype)]


softmax_tangent_p = formula_primitive("jaxnorm_softmax_tangent", _tangent_formula, ("R,C", "R,C?", "R,C"))


def _tangent_transpose(cts, y, mask, dx, *, log, has_mask):
    (ct,) = cts
    if type(ct) is ad.Zero:
        return [None, None, None]
    (gx,) = softmax_bwd_p.bind(y, ct.astype(y.dtype), mask, log=log, has_mask=has_mask)
    return [None, None, gx.astype(dx.aval.dtype)]


def _fwd_jvp(primals, tangents, *, log, has_mask):
    x, mask = primals
    (y,) = softmax_fwd_p.bind(x, mask, log=log, has_mask=has_mask)
    (dy,) = softmax_tangent_p.bind(y, mask, ad.instantiate_zeros(tangents[0]), log=log, has_mask=has_mask)
    return (y,), (dy,)


ad.primitive_jvps[softmax_fwd_p] = _fwd_jvp
softmax_tangent_p.def_transpose(_tangent_transpose)
define_jvp_by_formula(softmax_bwd_p, _bwd_formula)
