"""shard_map's varying-manual-axes types (check_vma=True) for jaxnorm's primitives.

Inside `jax.shard_map`, every value's type says over which manual mesh axes it varies. jnp's
binary ops cast an invariant operand (a replicated scale) to varying implicitly, and the cast's
transpose sums its gradient over those axes. jaxnorm does the same explicitly before binding its
primitives (`vary_together`), and its primitives give their results the operands'
varying axes (`result_aval`). JAX 0.10 keeps the axes in `aval.manual_axis_type.varying`; later
versions in `aval.vma`.
"""

from __future__ import annotations

import jax
from jax.core import ShapedArray

try:  # where the current (abstract) mesh's sharding comes from; present in the supported versions
    from jax._src.core import get_cur_mesh_sharding as _cur_mesh_sharding
except ImportError:  # pragma: no cover
    _cur_mesh_sharding = None


def varying_axes(aval) -> frozenset:
    mat = getattr(aval, "manual_axis_type", None)
    if mat is not None and hasattr(mat, "varying"):
        return frozenset(mat.varying)
    return frozenset(getattr(aval, "vma", None) or ())


def vary_together(*arrays):
    """The arrays (None kept), each cast to vary over every manual axis any of them varies over."""
    types = [None if a is None else varying_axes(jax.typeof(a)) for a in arrays]
    union = frozenset().union(*(t for t in types if t is not None))
    if not union:
        return arrays
    return tuple(
        a if t is None or t == union else jax.lax.pcast(a, tuple(sorted(union - t, key=str)), to="varying")
        for a, t in zip(arrays, types)
    )


def result_aval(operand_avals, shape, dtype) -> ShapedArray:
    """A result's type: the operands' varying axes (all equal after vary_together; empty
    placeholders for absent operands are invariant and do not count)."""
    typed = [(varying_axes(a), a) for a in operand_avals]
    union = frozenset().union(*(t for t, _ in typed))
    if not union:
        return ShapedArray(shape, dtype)
    for t, a in typed:
        if t == union:
            return a.update(shape=shape, dtype=dtype, weak_type=False, sharding=_cur_mesh_sharding())
    raise TypeError(
        "jaxnorm: operands vary over different manual mesh axes "
        f"({sorted(map(sorted, {t for t, _ in typed}), key=str)}); cast them with jax.lax.pcast(..., to='varying')"
    )
