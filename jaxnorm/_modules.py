"""What the framework modules (jaxnorm.flax, jaxnorm.nnx, jaxnorm.equinox) share: their norm
arguments mapped onto jaxnorm's kernel, and the options the kernel cannot honour refused. Imports
no framework, so that ``import jaxnorm`` never needs one."""

from __future__ import annotations

import importlib
import math

import numpy as np

import jax.numpy as jnp

from jaxnorm import _checks
from jaxnorm.norm import normalize


def require(framework: str, extra: str):
    """Imports the framework, or says which extra installs it."""
    try:
        return importlib.import_module(framework)
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(
            f"jaxnorm.{extra} needs {framework}: pip install 'jaxnorm[{extra}]'", name=e.name
        ) from e


def norm(fn, x, scale, bias, *, k, epsilon, out_dtype, memory_efficient, centered):
    """x normalized over its ``k`` trailing axes, scale/bias shaped like them, the result in
    ``out_dtype`` rounded once: the frameworks compute in float32 and cast to ``out_dtype``, which
    may be wider than x (flax gives float32 for bfloat16 x with float32 parameters), so x is widened
    first in that case, and the result narrowed after otherwise."""
    x = _checks.as_array(x, fn, "x")
    compute = np.dtype(jnp.promote_types(x.dtype, out_dtype))
    if compute not in _checks.SUPPORTED:
        raise TypeError(
            f"{fn}: x of dtype {np.dtype(x.dtype)} with output dtype {np.dtype(out_dtype)} would be "
            f"computed in {compute}; the kernel takes float32, bfloat16 or float16"
        )
    axis = tuple(range(-k, 0))
    y = normalize(x.astype(compute), scale, bias, axis, epsilon, memory_efficient, centered=centered, fn=fn)
    return y.astype(out_dtype)


# ---- flax (linen and nnx have the same attributes and semantics) ----


def _feature_axes(fn, ndim, feature_axes) -> tuple[int, ...]:
    axes = (feature_axes,) if isinstance(feature_axes, (int, np.integer)) else tuple(feature_axes)
    return _checks.canonical_axes(ndim, axes, fn, "feature_axes") if axes else ()


def flax_param_shape(fn, x_shape, feature_axes) -> tuple[int, ...]:
    """The scale/bias shape flax.linen creates: the feature axes' sizes, in axis order."""
    return tuple(x_shape[a] for a in _feature_axes(fn, len(x_shape), feature_axes))


def flax_norm(module, fn, x, scale, bias, mask, *, centered, out_dtype):
    """flax's LayerNorm/RMSNorm over ``module.reduction_axes`` (trailing), with scale/bias over
    ``module.feature_axes``: a subset of the reduction axes, broadcast over the others (flax's
    default for ``reduction_axes=(-2, -1)`` is ``feature_axes=-1``). ``use_fast_variance`` selects
    how flax computes the variance, not which one: the kernel always uses the stable two-pass
    formula, so the flag has no effect."""
    for name, value in (("axis_name", module.axis_name), ("axis_index_groups", module.axis_index_groups)):
        if value is not None:
            raise NotImplementedError(
                f"{fn}: `{name}` ({value!r}) is not supported: the kernel's statistics cover the "
                "local array only, not other devices' shards"
            )
    if mask is not None:
        raise NotImplementedError(f"{fn}: `mask` is not supported: the kernel normalizes over every element")
    x = _checks.as_array(x, fn, "x")
    if x.ndim:  # flax normalizes any axes; the kernel only trailing ones (a scalar: trailing_axes says)
        axes = _checks.canonical_axes(x.ndim, module.reduction_axes, fn, "reduction_axes")
        if axes != tuple(range(x.ndim - len(axes), x.ndim)):
            raise NotImplementedError(
                f"{fn}: `reduction_axes` {module.reduction_axes!r} must name trailing axes of x (shape "
                f"{tuple(x.shape)}): the kernel normalizes trailing axes; move the axes to the end first"
            )
    k = _checks.trailing_axes(x.shape, module.reduction_axes, fn, "reduction_axes")
    first = x.ndim - k
    features = _feature_axes(fn, x.ndim, module.feature_axes)
    if any(a < first for a in features):
        raise NotImplementedError(
            f"{fn}: feature_axes {module.feature_axes!r} must be among the reduction axes "
            f"{module.reduction_axes!r} (x of shape {tuple(x.shape)}): the kernel applies scale and "
            "bias over the normalized axes only"
        )
    spread = tuple(x.shape[a] if a in features else 1 for a in range(first, x.ndim))
    scale, bias = (_spread(fn, name, p, spread, x.shape, first, module.feature_axes)
                   for name, p in (("scale", scale), ("bias", bias)))
    return norm(fn, x, scale, bias, k=k, epsilon=module.epsilon, out_dtype=out_dtype,
                memory_efficient=module.memory_efficient, centered=centered)


def _spread(fn, name, p, spread, x_shape, first, feature_axes):
    """A parameter over the feature axes (any shape of their size: nnx keeps it flat), broadcast
    to the normalized axes' shape ``x_shape[first:]``."""
    if p is None:
        return None
    if math.prod(p.shape) != math.prod(spread):
        raise ValueError(
            f"{fn}: `{name}` of shape {tuple(p.shape)} does not fit feature_axes {feature_axes!r} of x "
            f"(shape {tuple(x_shape)}), which hold {math.prod(spread)} elements"
        )
    return jnp.broadcast_to(p.reshape(spread), x_shape[first:])
