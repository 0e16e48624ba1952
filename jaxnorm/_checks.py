"""Trace-time argument checks: every bad input becomes a ValueError/TypeError that names the
function, the argument, and the shapes or dtypes involved."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

import jax.numpy as jnp

SUPPORTED = (np.dtype(np.float32), np.dtype(jnp.bfloat16), np.dtype(np.float16))
_SUPPORTED_NAMES = "float32, bfloat16 or float16"


def as_array(x, fn: str, name: str):
    if x is None:
        raise TypeError(f"{fn}: `{name}` must be an array, got None")
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        try:
            x = jnp.asarray(x)
        except Exception as e:  # strings, objects
            raise TypeError(f"{fn}: `{name}` must be an array, got {type(x).__name__}") from e
    return x


def int32_clamped(x, lo: int, hi: int):
    """Integer array x as int32, clamped to [lo, hi] where the cast alone would change a value: in
    x's own dtype, with the bounds limited to its range (so a narrow dtype's bound cannot wrap), and
    by numpy for a numpy array (jnp narrows a numpy int64 to int32 by wrapping when x64 is off). An
    int32 x comes back unclamped: its values need no cast, and the callers' kernels or checks bound
    them."""
    if np.dtype(x.dtype) == np.int32:
        return jnp.asarray(x)
    info = np.iinfo(x.dtype)
    lo, hi = max(lo, int(info.min)), min(hi, int(info.max))
    if isinstance(x, (np.ndarray, np.generic)):
        return jnp.asarray(np.clip(x, lo, hi).astype(np.int32))
    return jnp.clip(x, lo, hi).astype(jnp.int32)


def static_float(value, fn: str, name: str) -> float:
    """A Python number given for a static float argument (not a string, a bool or a traced value)."""
    if isinstance(value, (str, bytes, bool, np.bool_)) or not hasattr(value, "__float__"):
        raise TypeError(f"{fn}: `{name}` must be a Python float, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except Exception as e:  # a traced value (ConcretizationTypeError), an array of several values
        raise TypeError(f"{fn}: `{name}` must be a Python float, got {type(value).__name__}") from e


def static_bool(value, fn: str, name: str) -> bool:
    """A Python bool flag: a string such as "no" would otherwise read as True."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fn}: `{name}` must be a Python bool, got {type(value).__name__} {value!r}")
    return bool(value)


def check_input_dtype(x, fn: str, name: str = "x"):
    dt = np.dtype(x.dtype)
    if dt not in SUPPORTED:
        raise TypeError(
            f"{fn}: `{name}` must be {_SUPPORTED_NAMES}, got {dt} with shape {tuple(x.shape)}"
        )


def check_param(p, fn: str, name: str, norm_shape: tuple[int, ...]):
    """A scale/bias: floating, shaped like the normalized axes. Returns it as (C,) float32."""
    if p is None:
        return None
    p = as_array(p, fn, name)
    if not jnp.issubdtype(p.dtype, jnp.floating):
        raise TypeError(f"{fn}: `{name}` must be a floating array, got {np.dtype(p.dtype)}")
    if tuple(p.shape) != tuple(norm_shape):
        raise ValueError(
            f"{fn}: `{name}` must have the shape of the normalized axes {tuple(norm_shape)}, "
            f"got {tuple(p.shape)}"
        )
    return p.reshape(-1).astype(jnp.float32)


def check_residual(residual, residual_dtype, x, fn: str):
    """The residual of a residual-add norm: x's shape, x's dtype or `residual_dtype`'s; the sum
    h = x + residual is kept in `residual_dtype`: x's dtype (the default) or float32. Returns
    (residual, h's dtype), (None, None) without a residual."""
    if residual is None:
        if residual_dtype is not None:
            raise ValueError(f"{fn}: `residual_dtype` ({residual_dtype!r}) is given without a `residual`")
        return None, None
    residual = as_array(residual, fn, "residual")
    check_input_dtype(residual, fn, "residual")
    if tuple(residual.shape) != tuple(x.shape):
        raise ValueError(f"{fn}: `residual` must have x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")
    x_dtype = np.dtype(x.dtype)
    if residual_dtype is None:
        h_dtype = x_dtype
    else:
        try:
            h_dtype = np.dtype(residual_dtype)
        except TypeError as e:
            raise TypeError(f"{fn}: `residual_dtype` must be a dtype, got {residual_dtype!r}") from e
        if h_dtype not in (x_dtype, np.dtype(np.float32)):
            raise TypeError(f"{fn}: `residual_dtype` must be x's dtype ({x_dtype}) or float32, got {h_dtype}")
    r_dtype = np.dtype(residual.dtype)
    if r_dtype not in (x_dtype, h_dtype):
        raise TypeError(
            f"{fn}: `residual` must have x's dtype ({x_dtype}) or residual_dtype ({h_dtype}), got {r_dtype} "
            f"with shape {tuple(residual.shape)}"
        )
    return residual, h_dtype


def _is_int(a) -> bool:
    return isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_))


def canonical_axes(ndim: int, axis, fn: str, name: str = "axis") -> tuple[int, ...]:
    if _is_int(axis):
        axes = (axis,)
    elif isinstance(axis, (tuple, list)):
        axes = tuple(axis)
    else:
        raise TypeError(f"{fn}: `{name}` must be an int or a tuple of ints, got {axis!r}")
    if not axes:
        raise ValueError(f"{fn}: `{name}` must name at least one axis, got {axis!r}")
    out = []
    for a in axes:
        if not _is_int(a):
            raise TypeError(f"{fn}: `{name}` entries must be ints, got {axis!r}")
        if not -ndim <= a < ndim:
            raise ValueError(f"{fn}: {name} {a} is out of range for an array of rank {ndim}")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"{fn}: `{name}` {axis!r} repeats an axis")
    return tuple(sorted(out))


def trailing_axes(shape: Sequence[int], axis, fn: str, name: str = "axis") -> int:
    """For the norms: `axis` must name trailing axes. Returns how many."""
    ndim = len(shape)
    if ndim == 0:
        raise ValueError(f"{fn}: `x` must have at least one axis to normalize, got a scalar")
    axes = canonical_axes(ndim, axis, fn, name)
    k = len(axes)
    if axes != tuple(range(ndim - k, ndim)):
        raise ValueError(
            f"{fn}: `{name}` must name trailing axes of x (shape {tuple(shape)}), got {axis!r}; "
            "move the axes to the end first"
        )
    return k


def any_axes(shape: Sequence[int], axis, fn: str) -> tuple[int, ...]:
    """For softmax: any axes, None meaning all (like jax.nn.softmax)."""
    if axis is None:
        return tuple(range(len(shape)))
    if len(shape) == 0:
        raise ValueError(f"{fn}: `x` must have at least one axis, got a scalar")
    return canonical_axes(len(shape), axis, fn)


def rows_cols(shape: Sequence[int], k: int) -> tuple[int, int]:
    return math.prod(shape[: len(shape) - k]), math.prod(shape[len(shape) - k :])


def check_where(where, x, fn: str, x_name: str = "x"):
    where = as_array(where, fn, "where")
    if not (jnp.issubdtype(where.dtype, jnp.bool_) or jnp.issubdtype(where.dtype, jnp.integer)):
        raise TypeError(f"{fn}: `where` must be a boolean mask, got {np.dtype(where.dtype)}")
    try:
        out = np.broadcast_shapes(tuple(where.shape), tuple(x.shape))
    except ValueError:
        out = None
    if out != tuple(x.shape):
        raise ValueError(
            f"{fn}: `where` of shape {tuple(where.shape)} does not broadcast to {x_name}'s shape "
            f"{tuple(x.shape)}"
        )
    return jnp.broadcast_to(where.astype(jnp.bool_), x.shape)
