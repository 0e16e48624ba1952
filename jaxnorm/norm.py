"""LayerNorm and RMSNorm."""

from __future__ import annotations

import numpy as np

import jax
import jax.numpy as jnp
from jax.interpreters import ad

from jaxnorm import _checks
from jaxnorm._ops import add_norm_bwd_p, add_norm_fwd_p, norm_bwd_p, norm_fwd_p
from jaxnorm._primitive import define_jvp_by_formula, empty_placeholder, formula_primitive
from jaxnorm._partition import as_rows
from jaxnorm._vma import vary_together


def layer_norm(x, scale=None, bias=None, *, axis=-1, epsilon=1e-6, memory_efficient=False, residual=None,
               residual_dtype=None, scale_offset=0.0):
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
        the rounding of ``y`` in ``x``'s dtype, amplified where ``|scale|`` is small. Where
        ``scale`` is 0, ``y`` holds nothing of ``x``: that column's scale gradient is 0, so a scale
        initialized to zeros never trains (use ``scale_offset`` or this mode off).
      residual: optional array of ``x``'s shape (the pre-norm transformer's residual stream).
        Then the function normalizes ``h = x + residual``, summed in float32 and stored in
        ``residual_dtype``, and returns ``(y, h)`` from one kernel that reads ``x`` and
        ``residual`` once and writes ``y`` and ``h`` once; the backward reads ``h`` (``y`` in
        memory-efficient mode), ``dy`` and ``h``'s cotangent once and writes the gradient of
        ``x + residual`` once (it is both inputs' gradient). ``residual`` has ``x``'s dtype or
        ``residual_dtype``.
      residual_dtype: the dtype of ``h``: ``x``'s (default) or float32 (a float32 residual
        stream beside bfloat16 sublayer outputs). ``y`` is normalized from ``h`` as stored, so
        ``(y, h)`` equals ``h = (x + residual).astype(residual_dtype); y = layer_norm(h, ...)
        .astype(x.dtype)``.
      scale_offset: a Python float added to ``scale`` in float32 before it is applied:
        ``y = x_hat * (scale_offset + scale) + bias``. 1.0 gives the zero-centred scale of Gemma
        (TransformerEngine's ``zero_centered_gamma``), whose parameters are stored around zero and
        keep their bfloat16 precision (``1 + scale`` is never rounded to ``scale``'s dtype). The
        gradient with respect to ``scale`` is unchanged by the offset. Needs a ``scale``.

    Returns:
      An array like ``x``, or ``(y, h)`` with a ``residual``. Differentiable in ``x``, ``scale`` and ``bias`` in reverse mode (the
      backward kernel; the scale/bias gradients are reduced in a fixed order, bitwise
      reproducible) and in forward mode (``jax.jvp``, ``jacfwd``, ``hessian``); ``jit`` and
      ``vmap`` compose with it.
    """
    return normalize(x, scale, bias, axis, epsilon, memory_efficient, centered=True, fn="layer_norm",
                     residual=residual, residual_dtype=residual_dtype, scale_offset=scale_offset)


def rms_norm(x, scale=None, *, axis=-1, epsilon=1e-6, memory_efficient=False, residual=None, residual_dtype=None,
             scale_offset=0.0):
    """Root-mean-square normalization over the trailing axes ``axis``, as one fused kernel.

    Equivalent to the following JAX code (``jaxnorm.reference.rms_norm``)::

        xf = x.astype(jnp.promote_types(x.dtype, jnp.float32))
        ms = jnp.mean(jnp.square(xf), axis, keepdims=True)
        return (xf * jax.lax.rsqrt(ms + epsilon) * scale).astype(x.dtype)

    Arguments as for :func:`layer_norm` (no bias). With ``memory_efficient=True`` the backward
    keeps ``y`` and recovers ``x_hat = y / scale``. With ``residual=r`` it returns ``(y, h)``,
    ``h = x + r`` in ``residual_dtype`` and ``y = rms_norm(h)``; ``scale_offset=1.0`` gives
    Gemma's ``x_hat * (1 + scale)``.
    """
    return normalize(x, scale, None, axis, epsilon, memory_efficient, centered=False, fn="rms_norm",
                     residual=residual, residual_dtype=residual_dtype, scale_offset=scale_offset)


def normalize(x, scale, bias, axis, epsilon, memory_efficient, *, centered, fn, residual=None,
              residual_dtype=None, scale_offset=0.0):
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
    scale = _offset_scale(scale, scale_offset, fn)
    residual, h_dtype = _checks.check_residual(residual, residual_dtype, x, fn)
    eps = _checks.static_float(epsilon, fn, "epsilon")
    memory_efficient = _checks.static_bool(memory_efficient, fn, "memory_efficient")
    if not eps >= 0.0:
        raise ValueError(f"{fn}: `epsilon` must be >= 0, got {epsilon!r}")
    if residual is None:
        if rows == 0:
            return x
        x, scale, bias = vary_together(x, scale, bias)
        y = _norm(as_rows(x, k), scale, bias, eps, centered, memory_efficient)
        return y.reshape(x.shape)
    if rows == 0:
        return x, (_f32(x) + _f32(residual)).astype(h_dtype)
    x, residual, scale, bias = vary_together(x, residual, scale, bias)
    y, h = _add_norm(as_rows(x, k), as_rows(residual, k), scale, bias, eps, centered,
                     memory_efficient, h_dtype)
    return y.reshape(x.shape), h.reshape(x.shape)


def _offset_scale(scale, scale_offset, fn):
    """scale_offset + scale in float32 (scale is float32 already), where a kernel would add them:
    the kernels then apply it as any scale, and its gradient is the scale's."""
    offset = _checks.static_float(scale_offset, fn, "scale_offset")
    if offset == 0.0:
        return scale
    if not np.isfinite(offset):
        raise ValueError(f"{fn}: `scale_offset` must be finite, got {scale_offset!r}")
    if scale is None:
        raise ValueError(f"{fn}: `scale_offset` ({offset}) needs a `scale` (it offsets the scale)")
    return scale + np.float32(offset)


def _or_empty(p):
    return empty_placeholder() if p is None else p


def _norm(x, scale, bias, eps, centered, memory_efficient):
    (y, _, _) = norm_fwd_p.bind(
        x, _or_empty(scale), _or_empty(bias), epsilon=eps, centered=centered, has_scale=scale is not None,
        has_bias=bias is not None, memory_efficient=memory_efficient,
    )
    return y


def _add_norm(x, residual, scale, bias, eps, centered, memory_efficient, h_dtype):
    (y, h, _, _) = add_norm_fwd_p.bind(
        x, residual, _or_empty(scale), _or_empty(bias), epsilon=eps, centered=centered, has_scale=scale is not None,
        has_bias=bias is not None, memory_efficient=memory_efficient, residual_dtype=h_dtype,
    )
    return y, h


# ---- derivatives ----
# The forward kernel's JVP gives y's tangent as norm_tangent_p, a linear map of (dx, dscale,
# dbias) whose transpose is the backward kernel: reverse mode (linearize, then transpose) runs
# the backward kernel on what norm_tangent_p keeps (x, or y in memory-efficient mode, and the
# row statistics), and forward mode evaluates the map with jnp. Second derivatives differentiate
# the jnp forms of the map and of the backward.


def _f32(a):
    return a.astype(jnp.promote_types(a.dtype, jnp.float32))


def _xhat(xin, mean, rstd, scale, bias, *, epsilon, centered, memory_efficient, has_scale, has_bias):
    """x_hat as the backward kernel recovers it (common/norm_math.h: norm_xhat)."""
    xin = _f32(xin)
    if memory_efficient:
        gamma = _f32(scale) if has_scale else 1.0
        beta = _f32(bias) if has_bias else 0.0
        if has_scale:
            gamma = jnp.copysign(jnp.maximum(jnp.abs(gamma), epsilon), gamma)
        return (xin - beta) / gamma
    return ((xin - mean[:, None]) if centered else xin) * rstd[:, None]


def _dxhat(xhat, rstd, g, centered):
    """The gradient through x_hat = (x - mean) * rstd (common/norm_math.h: norm_dx)."""
    c2 = jnp.mean(g * xhat, axis=1, keepdims=True)
    c1 = jnp.mean(g, axis=1, keepdims=True) if centered else 0.0
    return rstd[:, None] * (g - c1 - xhat * c2)


def _tangent_formula(xin, mean, rstd, scale, bias, dx, dscale, dbias, *, out_dtype, **flags):
    xhat = _xhat(xin, mean, rstd, scale, bias, **flags)
    gamma = _f32(scale) if flags["has_scale"] else 1.0
    # The map is self-adjoint in x_hat: dy = gamma * (J dx) with J = d x_hat / d x symmetric.
    dy = gamma * _dxhat(xhat, rstd, _f32(dx), flags["centered"])
    if flags["has_scale"]:
        dy = dy + xhat * _f32(dscale)
    if flags["has_bias"]:
        dy = dy + _f32(dbias)
    return [dy.astype(out_dtype)]


def _bwd_terms(xin, dy, mean, rstd, scale, bias, *, groups, epsilon, centered, has_scale, has_bias,
               memory_efficient):
    """The backward kernel's results, dx in float32."""
    flags = dict(epsilon=epsilon, centered=centered, memory_efficient=memory_efficient, has_scale=has_scale,
                 has_bias=has_bias)
    xhat = _xhat(xin, mean, rstd, scale, bias, **flags)
    dyf = _f32(dy)
    gamma = _f32(scale) if has_scale else 1.0
    dx = _dxhat(xhat, rstd, dyf * gamma, centered)
    rows, cols = dyf.shape
    per_group = lambda a: a.reshape(groups, rows // groups if groups else 0, cols).sum(axis=1)
    return [dx, per_group(dyf * xhat), per_group(dyf)]


def _bwd_formula(xin, dy, mean, rstd, scale, bias, **params):
    dx, dscale, dbias = _bwd_terms(xin, dy, mean, rstd, scale, bias, **params)
    return [dx.astype(xin.dtype), dscale, dbias]


def _add_bwd_formula(hin, dy, dh, mean, rstd, scale, bias, *, has_dh, residual_dtype, **params):
    dx, dscale, dbias = _bwd_terms(hin, dy, mean, rstd, scale, bias, **params)
    return [(dx + _f32(dh) if has_dh else dx).astype(residual_dtype), dscale, dbias]


norm_tangent_p = formula_primitive(
    "jaxnorm_norm_tangent", _tangent_formula, ("R,C", "R?", "R", "C?", "C?", "R,C", "C?", "C?"))


def _tangent_transpose(cts, xin, mean, rstd, scale, bias, dx, dscale, dbias, *, out_dtype, epsilon, centered,
                       memory_efficient, has_scale, has_bias):
    (ct,) = cts
    if type(ct) is ad.Zero:
        return [None] * 8
    mean = rstd if mean.shape == (0,) else mean  # absent: the kernel does not read it
    gx, gscale, gbias = norm_bwd_p.bind(
        xin, ct.astype(xin.dtype), mean, rstd, scale, bias, groups=1, epsilon=epsilon, centered=centered,
        has_scale=has_scale, has_bias=has_bias, memory_efficient=memory_efficient)
    out = [None] * 5
    out.append(gx.astype(dx.aval.dtype) if ad.is_undefined_primal(dx) else None)
    out.append(gscale[0].astype(dscale.aval.dtype) if ad.is_undefined_primal(dscale) and has_scale else None)
    out.append(gbias[0].astype(dbias.aval.dtype) if ad.is_undefined_primal(dbias) and has_bias else None)
    return out


def _add_tangent_formula(hin, mean, rstd, scale, bias, dx, dr, dscale, dbias, *, out_dtype, residual_dtype,
                         **flags):
    """(dy, dh): h = x + r's tangent dx + dr (the rounding to h's dtype passes tangents through),
    and y's through the norm of h."""
    dh = _f32(dx) + _f32(dr)
    (dy,) = _tangent_formula(hin, mean, rstd, scale, bias, dh, dscale, dbias, out_dtype=out_dtype, **flags)
    return [dy, dh.astype(residual_dtype)]


add_norm_tangent_p = formula_primitive(
    "jaxnorm_add_norm_tangent", _add_tangent_formula,
    ("R,C", "R?", "R", "C?", "C?", "R,C", "R,C", "C?", "C?"))


def _add_tangent_transpose(cts, hin, mean, rstd, scale, bias, dx, dr, dscale, dbias, *, out_dtype, residual_dtype,
                           epsilon, centered, memory_efficient, has_scale, has_bias):
    ct_y, ct_h = cts
    has_dy, has_dh = type(ct_y) is not ad.Zero, type(ct_h) is not ad.Zero
    gscale = gbias = None
    if has_dy:
        mean = rstd if mean.shape == (0,) else mean  # absent: the kernel does not read it
        gh, gscale, gbias = add_norm_bwd_p.bind(
            hin, ct_y.astype(out_dtype), ct_h.astype(residual_dtype) if has_dh else empty_placeholder(residual_dtype),
            mean, rstd, scale, bias, groups=1, epsilon=epsilon, centered=centered, has_scale=has_scale,
            has_bias=has_bias, memory_efficient=memory_efficient, has_dh=has_dh, residual_dtype=residual_dtype)
    elif has_dh:
        gh = ct_h  # y discarded: h's cotangent alone, no kernel
    else:
        return [None] * 9
    out = [None] * 5
    out.append(gh.astype(dx.aval.dtype) if ad.is_undefined_primal(dx) else None)
    out.append(gh.astype(dr.aval.dtype) if ad.is_undefined_primal(dr) else None)
    use = lambda g, p, present: g[0].astype(p.aval.dtype) if g is not None and ad.is_undefined_primal(p) and present else None
    out.append(use(gscale, dscale, has_scale))
    out.append(use(gbias, dbias, has_bias))
    return out


def _stat_tangents(x, dx, mean, rstd, centered):
    """The row statistics' tangents (read only by second derivatives: the backward's inputs)."""
    xf, dxf = _f32(x), _f32(dx)
    if centered:
        dmean = jnp.mean(dxf, axis=1)
        drstd = -rstd**3 * jnp.mean((xf - mean[:, None]) * dxf, axis=1)
    else:
        dmean = jnp.zeros_like(mean)
        drstd = -rstd**3 * jnp.mean(xf * dxf, axis=1)
    return dmean.astype(mean.dtype), drstd.astype(rstd.dtype)


def _fwd_jvp(primals, tangents, *, epsilon, centered, has_scale, has_bias, memory_efficient):
    x, scale, bias = primals
    y, mean, rstd = norm_fwd_p.bind(x, scale, bias, epsilon=epsilon, centered=centered, has_scale=has_scale,
                                    has_bias=has_bias, memory_efficient=memory_efficient)
    dx, dscale, dbias = (ad.instantiate_zeros(t) for t in tangents)
    flags = dict(epsilon=epsilon, centered=centered, memory_efficient=memory_efficient, has_scale=has_scale,
                 has_bias=has_bias)
    # What reverse mode keeps: x, or y in memory-efficient mode; the mean only where x_hat needs it.
    kept_mean = mean if centered and not memory_efficient else empty_placeholder()
    (dy,) = norm_tangent_p.bind(y if memory_efficient else x, kept_mean, rstd, scale, bias, dx, dscale, dbias,
                                out_dtype=np.dtype(x.dtype), **flags)
    return (y, mean, rstd), (dy, *_stat_tangents(x, dx, mean, rstd, centered))


def _add_fwd_jvp(primals, tangents, *, residual_dtype, **flags):
    x, residual, scale, bias = primals
    y, h, mean, rstd = add_norm_fwd_p.bind(*primals, residual_dtype=residual_dtype, **flags)
    dx, dr, dscale, dbias = (ad.instantiate_zeros(t) for t in tangents)
    # As _fwd_jvp, with h in x's place: reverse mode keeps h, or y in memory-efficient mode.
    me, centered = flags["memory_efficient"], flags["centered"]
    kept_mean = mean if centered and not me else empty_placeholder()
    dy, dh = add_norm_tangent_p.bind(y if me else h, kept_mean, rstd, scale, bias, dx, dr, dscale, dbias,
                                     out_dtype=np.dtype(x.dtype), residual_dtype=residual_dtype, **flags)
    return (y, h, mean, rstd), (dy, dh, *_stat_tangents(h, dh, mean, rstd, centered))


ad.primitive_jvps[norm_fwd_p] = _fwd_jvp
norm_tangent_p.def_transpose(_tangent_transpose)
define_jvp_by_formula(norm_bwd_p, _bwd_formula)
ad.primitive_jvps[add_norm_fwd_p] = _add_fwd_jvp
add_norm_tangent_p.def_transpose(_add_tangent_transpose)
define_jvp_by_formula(add_norm_bwd_p, _add_bwd_formula)
