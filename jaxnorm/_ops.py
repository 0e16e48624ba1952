"""jaxnorm's primitives: one per FFI target, all built by the shared helper in _primitive.py.
The operand/result layouts match ffi_src/common/signatures.h."""

from __future__ import annotations

import numpy as np

from jax.core import ShapedArray

from jaxnorm._primitive import FfiOp, make_primitive

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


NORM_FWD = FfiOp(
    name="jaxnorm_norm_fwd",
    operands=("R,C", "C?", "C?"),
    results=(("R,C", "x"), ("R", F32), ("R", F32)),
    attrs=("epsilon", "centered", "has_scale", "has_bias"),
)
NORM_BWD = FfiOp(
    name="jaxnorm_norm_bwd",
    operands=("R,C", "R,C", "R", "R", "C?", "C?"),
    results=(("R,C", "x"), ("G,C", F32), ("G,C", F32)),
    attrs=("epsilon", "centered", "has_scale", "has_bias", "memory_efficient"),
    workspace=_norm_bwd_workspace,
)
SOFTMAX_FWD = FfiOp(
    name="jaxnorm_softmax_fwd",
    operands=("R,C", "R,C?"),
    results=(("R,C", "x"),),
    attrs=("log", "has_mask"),
)
SOFTMAX_BWD = FfiOp(
    name="jaxnorm_softmax_bwd",
    operands=("R,C", "R,C", "R,C?"),
    results=(("R,C", "x"),),
    attrs=("log", "has_mask"),
)

# Sampling: keys and the per-row parameters are grouped ("N"): one entry for all rows, one per
# row, or one per vmapped example.
SAMPLE = FfiOp(
    name="jaxnorm_sample",
    operands=("R,C", "N,*", "N", "N", "N", "N"),  # logits, keys, temperature, top_k, top_p, log min_p
    results=(("R", np.int32),),
    attrs=(),
)
FILTER = FfiOp(
    name="jaxnorm_filter",
    operands=("R,C", "N", "N", "N"),  # logits, top_k, top_p, log min_p
    results=(("R,C", "x"),),
    attrs=(),
)
TOP_K = FfiOp(
    name="jaxnorm_top_k",
    operands=("R,C",),
    results=(("R,k", np.int32),),
    attrs=("k",),
)

norm_fwd_p = make_primitive(NORM_FWD)
norm_bwd_p = make_primitive(NORM_BWD)
softmax_fwd_p = make_primitive(SOFTMAX_FWD)
softmax_bwd_p = make_primitive(SOFTMAX_BWD)
sample_p = make_primitive(SAMPLE)
filter_p = make_primitive(FILTER)
top_k_p = make_primitive(TOP_K)

TARGETS = tuple(op.name for op in (NORM_FWD, NORM_BWD, SOFTMAX_FWD, SOFTMAX_BWD, SAMPLE, FILTER, TOP_K))
