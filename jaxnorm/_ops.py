"""jaxnorm's primitives: one per FFI target, all built by the shared helper in _primitive.py.
The operand/result layouts match ffi_src/common/signatures.h."""

from __future__ import annotations

import numpy as np

from jax.core import ShapedArray

from jaxnorm._primitive import RowOp, make_primitive

F32 = np.float32

# Per-group partial sums of the scale/bias gradients: at most this many floats of workspace per
# column set, so wide rows do not allocate more than 2^22 * 8 bytes (32 MiB).
_PARTIAL_BUDGET = 1 << 22
_MAX_PARTIALS = 512


def partial_rows(rows_per_group: int, cols: int, groups: int) -> int:
    """How many partial rows the backward may write per group (the CUDA kernels use at most this
    many workers per group, then reduce the partials in a fixed order)."""
    budget = max(1, min(_MAX_PARTIALS, _PARTIAL_BUDGET // max(cols, 1)))
    return max(1, min(rows_per_group, budget // max(groups, 1)))


def _norm_bwd_workspace(avals_in, params):
    rows, cols = avals_in[0].shape
    groups = params["groups"]
    p = partial_rows(rows // groups if groups else 0, cols, groups)
    return [ShapedArray((groups, p, 2, cols), F32)]


NORM_FWD = RowOp(
    name="jaxnorm_norm_fwd",
    operands=("rows", "col", "col"),
    results=(("rows", "x"), ("rowstat", F32), ("rowstat", F32)),
    attrs=("epsilon", "centered", "has_scale", "has_bias"),
)
NORM_BWD = RowOp(
    name="jaxnorm_norm_bwd",
    operands=("rows", "rows", "rowstat", "rowstat", "col", "col"),
    results=(("rows", "x"), ("groupcol", F32), ("groupcol", F32)),
    attrs=("epsilon", "centered", "has_scale", "has_bias", "memory_efficient"),
    workspace=_norm_bwd_workspace,
)
SOFTMAX_FWD = RowOp(
    name="jaxnorm_softmax_fwd",
    operands=("rows", "rows?"),
    results=(("rows", "x"),),
    attrs=("log", "has_mask"),
)
SOFTMAX_BWD = RowOp(
    name="jaxnorm_softmax_bwd",
    operands=("rows", "rows", "rows?"),
    results=(("rows", "x"),),
    attrs=("log", "has_mask"),
)

norm_fwd_p = make_primitive(NORM_FWD)
norm_bwd_p = make_primitive(NORM_BWD)
softmax_fwd_p = make_primitive(SOFTMAX_FWD)
softmax_bwd_p = make_primitive(SOFTMAX_BWD)

TARGETS = tuple(op.name for op in (NORM_FWD, NORM_BWD, SOFTMAX_FWD, SOFTMAX_BWD))
