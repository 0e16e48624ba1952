"""jaxnorm's primitives: one per FFI target, all built by the shared helper in _primitive.py.
The operand/result layouts match ffi_src/common/signatures.h."""

from __future__ import annotations

import numpy as np

from jax.core import ShapedArray

from jaxnorm._primitive import FFI_OPS, FfiOp, make_primitive

F32 = np.float32

# Per-group partial sums of the scale/bias gradients: at most this many floats of workspace per
# column set, so wide rows do not allocate more than 2^22 * 8 bytes (32 MiB).
_PARTIAL_BUDGET = 1 << 22
_MAX_PARTIALS = 512
# Rows of up to 512 columns run tiles of many small CTAs an SM, which the 512 cap left short of a
# full grid: 1184 (8 CTAs an SM on up to 148 SMs; H100/H200 have 132) ran 16-bit RMSNorm's
# forward+backward 1.035-1.04x at 128-256 columns, LayerNorm's 1.01x; at 768 RMSNorm's warp-row
# tile lost (0.984x), from 2048 on level (H200, results/h200-1024bwd).
_MAX_PARTIALS_NARROW, _NARROW_COLS = 1184, 512


def partial_rows(rows_per_group: int, cols: int, groups: int) -> int:
    """How many partial rows the backward may write per group (the CUDA kernels use at most this
    many workers per group, then reduce the partials in a fixed order)."""
    cap = _MAX_PARTIALS_NARROW if cols <= _NARROW_COLS else _MAX_PARTIALS
    budget = max(1, min(cap, _PARTIAL_BUDGET // max(cols, 1)))
    return max(1, min(rows_per_group, budget // max(groups, 1)))


def _norm_bwd_workspace(avals_in, params, platform):
    rows, cols = avals_in[0].shape
    groups = params["groups"]
    p = partial_rows(rows // groups if groups else 0, cols, groups)
    return [ShapedArray((groups, p, 2, cols), F32)]


NORM_FWD = FfiOp(
    name="jaxnorm_norm_fwd",
    operands=("R,C", "C?", "C?"),
    results=(("R,C", "x"), ("R", F32), ("R", F32)),
    attrs=("epsilon", "centered", "has_scale", "has_bias"),
    row_sharded=True,
)
NORM_BWD = FfiOp(
    name="jaxnorm_norm_bwd",
    operands=("R,C", "R,C", "R", "R", "C?", "C?"),
    results=(("R,C", "x"), ("G,C", F32), ("G,C", F32)),
    attrs=("epsilon", "centered", "has_scale", "has_bias", "memory_efficient"),
    workspace=_norm_bwd_workspace,
    row_sharded=True,
)
# Residual-add + norm: h = x + residual (float32 sum, stored in `residual_dtype`, x's or float32)
# is normalized and returned beside y. The backward reads h (or y when memory_efficient), dy and,
# where `has_dh`, h's cotangent dh, and writes dx + dh once, in h's dtype: the gradient of both x
# and residual. `residual_dtype` is a parameter, not an attribute: the handlers read it from the
# buffers' element types.
def _residual_dtype(avals, params):
    return params["residual_dtype"]


ADD_NORM_FWD = FfiOp(
    name="jaxnorm_add_norm_fwd",
    operands=("R,C", "R,C", "C?", "C?"),  # x, residual, scale, bias
    results=(("R,C", "x"), ("R,C", _residual_dtype), ("R", F32), ("R", F32)),  # y, h, mean, rstd
    attrs=NORM_FWD.attrs,
    row_sharded=True,
)
ADD_NORM_BWD = FfiOp(
    name="jaxnorm_add_norm_bwd",
    operands=("R,C", "R,C", "R,C?", "R", "R", "C?", "C?"),  # h (or y), dy, dh, mean, rstd, scale, bias
    results=(("R,C", _residual_dtype), ("G,C", F32), ("G,C", F32)),
    attrs=NORM_BWD.attrs + ("has_dh",),
    workspace=_norm_bwd_workspace,
    row_sharded=True,
)
SOFTMAX_FWD = FfiOp(
    name="jaxnorm_softmax_fwd",
    operands=("R,C", "R,C?"),
    results=(("R,C", "x"),),
    attrs=("log", "has_mask"),
    row_sharded=True,
)
SOFTMAX_BWD = FfiOp(
    name="jaxnorm_softmax_bwd",
    operands=("R,C", "R,C", "R,C?"),
    results=(("R,C", "x"),),
    attrs=("log", "has_mask"),
    row_sharded=True,
)

# Softmax cross-entropy with integer labels: the forward writes the per-row loss and saves (lse,
# kept count) for the backward, which reads the logits once more and writes dlogits in their dtype.
_CE_ATTRS = ("label_smoothing", "z_loss", "ignore_index", "has_mask")
# On the GPU a wide row is read by several CTAs at once, chunks of about _CE_CHUNK columns (at
# least _CE_MIN_CHUNK when that gives the grid _CE_CTAS CTAs; _CE_CHUNK is one step of a CTA over
# 16-bit logits), which write partial statistics to the workspace, (rows, chunks, 4) f32: 1/2048
# of bf16 logits. Rows of one chunk are not split.
_CE_CHUNK, _CE_MIN_CHUNK, _CE_CTAS = 16384, 2048, 4096


def ce_chunks(rows: int, cols: int) -> int:
    """How many chunks the CUDA forward may split each row into (0: none)."""
    if cols <= _CE_CHUNK:
        return 0
    k = -(-cols // _CE_CHUNK)
    if rows * k < _CE_CTAS:
        k = max(k, min(-(-cols // _CE_MIN_CHUNK), -(-_CE_CTAS // max(rows, 1))))
    return k


def _ce_fwd_workspace(avals_in, params, platform):
    rows, cols = avals_in[0].shape
    return [ShapedArray((rows, ce_chunks(rows, cols) if platform == "cuda" else 0, 4), F32)]


def _cross_entropy_fwd(version):
    return FfiOp(
        name="jaxnorm_cross_entropy_fwd" + ("_v2" if version == 2 else ""),
        operands=("R,C", "R", "R,C?"),  # logits, labels (int32), mask
        results=(("R", F32), ("R,2", F32)),  # loss, stats = (lse, kept count)
        attrs=_CE_ATTRS,
        workspace=_ce_fwd_workspace if version == 2 else None,
        row_sharded=True,
    )


# Version 2 of the forward target adds the workspace; version 1 stays registered for artifacts
# exported before FFI version 4 (README, Export), its rows never split.
CROSS_ENTROPY_FWD_V1, CROSS_ENTROPY_FWD = _cross_entropy_fwd(1), _cross_entropy_fwd(2)
CROSS_ENTROPY_BWD = FfiOp(
    name="jaxnorm_cross_entropy_bwd",
    operands=("R,C", "R", "R,2", "R", "R,C?"),  # logits, labels, stats, dloss (f32), mask
    results=(("R,C", "x"),),
    attrs=_CE_ATTRS,
    row_sharded=True,
)
# The reduced losses' forward and gradient in one (jaxnorm/cross_entropy.py): the loss and
# dlogits = weight * d loss / d logits. Its workspace is the stats and partials of the rows that
# the CUDA handler takes by the forward and backward kernels (rows it cannot hold in one read).
def _ce_fwd_grad_workspace(avals_in, params, platform):
    rows = avals_in[0].shape[0]
    return [ShapedArray((rows, 2), F32), *_ce_fwd_workspace(avals_in, params, platform)]


CROSS_ENTROPY_FWD_GRAD = FfiOp(
    name="jaxnorm_cross_entropy_fwd_grad",
    operands=("R,C", "R", "R,C?", "R"),  # logits, labels (int32), mask, weight (f32)
    results=(("R", F32), ("R,C", "x")),  # loss, dlogits
    attrs=_CE_ATTRS,
    workspace=_ce_fwd_grad_workspace,
    row_sharded=True,
)

# Sampling: keys and the per-row parameters are grouped ("N"): one entry for all rows, one per
# row, or one per vmapped example. The "_v2" targets (FFI version 4) add the decoding loop's
# logits update: an output bias (float32, shared by the rows) read with the logits, and
# finished/end_id (grouped) that force a row's token. jaxnorm lowers only to them; the first
# versions stay declared for artifacts exported before version 4 (tests/export_program.py keeps
# their signatures pinned and their handlers running).
_SAMPLE_OPERANDS = ("R,C", "N,*", "N", "N", "N", "N")  # logits, keys, temperature, top_k, top_p, log min_p


def _sample(v2, name=None, filters=True):
    operands = _SAMPLE_OPERANDS if filters else _SAMPLE_OPERANDS[:3] + ("N?", "N?") + _SAMPLE_OPERANDS[5:]
    return FfiOp(
        name=name or "jaxnorm_sample" + ("_v2" if v2 else ""),
        operands=operands + (("C?", "N?", "N?") if v2 else ()),  # bias (f32), finished (bool), end_id
        results=(("R", np.int32),),
        attrs=(),
        row_sharded=True,
        # One key shared by the batch numbers the rows globally in the Philox counter: a device
        # holding rows 16-31 must not number them 0-15. A key per row makes each row independent.
        rows_local=lambda avals: avals[1].shape[0] == avals[0].shape[0],
    )


def _filter(v2):
    return FfiOp(
        name="jaxnorm_filter" + ("_v2" if v2 else ""),
        operands=("R,C", "N", "N", "N") + (("C?",) if v2 else ()),  # logits, top_k, top_p, log min_p[, bias (f32)]
        results=(("R,C", "x"),),
        attrs=(),
        row_sharded=True,
    )


SAMPLE, SAMPLE_V2, FILTER, FILTER_V2 = _sample(False), _sample(True), _filter(False), _filter(True)
# sample_v2 for calls whose top_k is given (FFI version 5): the CUDA handler may then take the
# sampler's one-read top-k kernel, which rows without top-k would only slow down.
SAMPLE_WITH_TOP_K = _sample(True, "jaxnorm_sample_with_top_k")
# sample_v2 for calls with neither top_k nor top_p (FFI version 6): their top_k and top_p operands
# are absent, so the CUDA handler knows every row's kept set follows from its maximum and may hold
# the rows in registers (ffi_src/cuda/sampling/mass_rows.cuh).
SAMPLE_BY_MASS = _sample(True, "jaxnorm_sample_by_mass", filters=False)
TOP_K = FfiOp(
    name="jaxnorm_top_k",
    operands=("R,C",),
    results=(("R,k", np.int32),),
    attrs=("k",),
    row_sharded=True,
)

# Padding removal: index maps from the lengths, then copies between the padded layout
# (B, heads, L, head_dim) and the packed rows (T, width). Both copies take both maps (source: the
# padded position of each packed row; position: the packed row of each padded position), so each
# one's transpose, the other copy, has the map it needs. "3" variants move q, k, v in one launch.
PAD_OFFSETS = FfiOp(
    name="jaxnorm_pad_offsets",
    operands=("B",),  # lengths
    results=(("capacity", np.int32), ("B,max_len", np.int32), ("B", np.int32), ("2", np.int32)),
    attrs=(),  # source, position, starts, (tokens, dropped)
)


def _pad_unpack(parts):
    return FfiOp(
        name="jaxnorm_pad_unpack" + ("3" if parts == 3 else ""),
        operands=("T,W", "W?", "B,L", "T"),  # packed, bias (f32), position, source
        results=(("B,heads,L,head_dim", "x"),) * parts,
        attrs=("heads",),
    )


def _one_head_major(avals):
    # A part of one head (remove_padding's x.reshape(B, 1, L, W)) is the same bytes whichever
    # place the size-1 axis takes in the layout; XLA's CPU compiler gives the 16-bit reshape that
    # axis as the most major and, against a row-major constraint, copied the whole input.
    return [(3, 2, 0, 1) if a.ndim == 4 and a.shape[1] == 1 else None for a in avals]


def _pad_pack(parts):
    return FfiOp(
        name="jaxnorm_pad_pack" + ("3" if parts == 3 else ""),
        operands=("B,heads,L,head_dim",) * parts + ("T", "B,L"),  # parts, source, position
        results=(("T,width", "x"),),
        attrs=(),
        operand_layouts=_one_head_major if parts == 1 else None,
    )


PAD_UNPACK, PAD_UNPACK3, PAD_PACK, PAD_PACK3 = _pad_unpack(1), _pad_unpack(3), _pad_pack(1), _pad_pack(3)


# Decode attention: q (B, Hq, D), caches (B, Hkv, L, D) or (B, L, Hkv, D) ("blhd"), lengths (B);
# the append form also takes k_new, v_new (B, Hkv, D) and returns the caches, aliased with the
# operands. Workspace: the splits' partial softmax states (max, sum, weighted V) in float32.
def _decode_workspace(avals_in, params, platform):
    batch, q_heads, head_dim = avals_in[0].shape
    splits = params["splits"]
    return [ShapedArray((batch * q_heads * splits * (2 + head_dim) if splits > 1 else 0,), F32)]


def _decode(append):
    cache = "R,S1,S2,D"  # (heads, len) or (len, heads): named only to size the results
    return FfiOp(
        name="jaxnorm_decode_attention" + ("_append" if append else ""),
        operands=("R,Hq,D", cache, cache, "R") + (("R,*,D", "R,*,D") if append else ()),
        results=(("R,Hq,D", "x"),) + (((cache, "x"),) * 2 if append else ()),
        attrs=("scale", "splits", "blhd"),
        workspace=_decode_workspace,
        aliases=((1, 1), (2, 2)) if append else (),
        row_sharded=True,
    )


DECODE, DECODE_APPEND = _decode(False), _decode(True)
# Embedding lookup + position encoding: one flattened token per row, the tables shared (a vmapped
# table maps sequentially). The output has the table's dtype (operand 2). The backward sums the
# rows of dout over runs of sorted ids into `rows` table rows (its own vmap rule: jaxnorm.embedding).
EMBED_FWD = FfiOp(
    name="jaxnorm_embed_fwd",
    operands=("R", "R", "V,D", "P,D?", "H?"),  # ids, positions, table, pos_table, inv_timescales (f32)
    results=(("R,D", 2),),
    attrs=("scale", "has_pos_table"),
    row_sharded=True,
)
EMBED_BWD = FfiOp(
    name="jaxnorm_embed_bwd",
    operands=("R,D", "R", "R"),  # dout, order (the stable sort's permutation), sorted ids
    results=(("rows,D", "x"),),
    attrs=("scale",),
)

# Causal linear attention, one multilinear kernel for the forward and every derivative: for rows r
# (batch x heads) and positions i, num[r, i] = sum over j <= i (j >= i if `reverse`) of
# s(i, j) c[r, j] with the score s(i, j) = a[r, i] . b[r, j] (+ alpha[r, i] beta[r, j] in the
# "_rank1" form, which the backward uses for the normalizer's cotangent), and den[r, i] the sum of
# the scores (float32); with `normalize`, out = num / (den + eps). Workspace: the states of up to
# `parts` pieces of each sequence (see common/linear_attention_args.h), so that a few long
# sequences still fill the GPU.
def linear_attention_parts(rows: int, length: int, k_dim: int, v_dim: int) -> int:
    """The most pieces the CUDA kernel may cut each sequence into (its workspace's bound): enough
    for about 1056 CTAs (8 an SM on an H100) over the rows and the slices of v (64 columns, 32
    when k_dim is 256), at most 32 (`kMaxParts` in la_common.cuh) and one per 64-position chunk.
    The handler takes as many as one wave of resident CTAs holds."""
    slices = -(-v_dim // (32 if k_dim >= 256 else 64))
    want = -(-1056 // max(1, rows * slices))
    return max(1, min(32, -(-length // 64), want))


def _linear_attention_workspace(avals_in, params, platform):
    rows, _, k_dim = avals_in[0].shape
    v_dim = avals_in[2].shape[2]
    parts = params["parts"]
    return [ShapedArray((rows * parts * ((k_dim + 1) * (v_dim + 1)) if parts > 1 else 0,), F32)]


def _linear_attention(rank1):
    return FfiOp(
        name="jaxnorm_linear_attention" + ("_rank1" if rank1 else ""),
        operands=("R,L,K", "R,L,K", "R,L,V") + (("R,L", "R,L") if rank1 else ()),  # a, b, c [, alpha, beta (f32)]
        # num in float32 for forward mode's tangents (unnormalized sums overflow float16)
        results=(("R,L,V", lambda avals, params: F32 if params["f32_out"] else avals[0].dtype), ("R,L", F32)),
        attrs=("normalize", "eps", "reverse", "f32_out", "parts"),
        workspace=_linear_attention_workspace,
        row_sharded=True,
        derived=lambda avals: {"parts": linear_attention_parts(*avals[0].shape, avals[2].shape[2])},
    )


LINEAR_ATTENTION, LINEAR_ATTENTION_RANK1 = _linear_attention(False), _linear_attention(True)

norm_fwd_p = make_primitive(NORM_FWD)
norm_bwd_p = make_primitive(NORM_BWD)
add_norm_fwd_p = make_primitive(ADD_NORM_FWD)
add_norm_bwd_p = make_primitive(ADD_NORM_BWD)
softmax_fwd_p = make_primitive(SOFTMAX_FWD)
softmax_bwd_p = make_primitive(SOFTMAX_BWD)
cross_entropy_fwd_v1_p = make_primitive(CROSS_ENTROPY_FWD_V1)  # artifacts before FFI version 4 only
cross_entropy_fwd_p = make_primitive(CROSS_ENTROPY_FWD)
cross_entropy_bwd_p = make_primitive(CROSS_ENTROPY_BWD)
cross_entropy_fwd_grad_p = make_primitive(CROSS_ENTROPY_FWD_GRAD)
sample_v1_p = make_primitive(SAMPLE)  # artifacts before FFI version 4 only
sample_p = make_primitive(SAMPLE_V2)
sample_with_top_k_p = make_primitive(SAMPLE_WITH_TOP_K)
sample_by_mass_p = make_primitive(SAMPLE_BY_MASS)
filter_v1_p = make_primitive(FILTER)  # artifacts before FFI version 4 only
filter_p = make_primitive(FILTER_V2)
top_k_p = make_primitive(TOP_K)
pad_offsets_p = make_primitive(PAD_OFFSETS)
pad_unpack_p = {1: make_primitive(PAD_UNPACK), 3: make_primitive(PAD_UNPACK3)}
pad_pack_p = {1: make_primitive(PAD_PACK), 3: make_primitive(PAD_PACK3)}
decode_p = make_primitive(DECODE)
decode_append_p = make_primitive(DECODE_APPEND)
embed_fwd_p = make_primitive(EMBED_FWD)
embed_bwd_p = make_primitive(EMBED_BWD)
linear_attention_p = make_primitive(LINEAR_ATTENTION)
linear_attention_rank1_p = make_primitive(LINEAR_ATTENTION_RANK1)

TARGETS = tuple(FFI_OPS)  # every target above, in declaration order
