"""Padding-free transformer layers (FasterTransformer's "effective transformer") with static shapes.

A batch of sequences padded to ``max_len`` wastes every position-wise op (projections, MLP, norms)
on padding. ``padding_offsets`` turns the lengths into index maps once; ``remove_padding`` then
gathers the valid tokens into a packed ``[capacity, ...]`` buffer, the position-wise work runs on
the packed rows, and ``add_qkv_bias_rebuild_padding`` / ``transpose_remove_padding`` move between
the packed rows and the attention layout, fused with the QKV bias add and the head transpose.

**Capacity.** JAX needs static shapes, so the packed buffer has a static number of rows, the
*capacity*, chosen by the caller: the saving is ``capacity / (batch * max_len)``. Pick it from a
few buckets above the batch's token count (each bucket compiles once), for example::

    buckets = [2048, 4096, 8192, 16384]                      # batch * max_len = 16384
    capacity = next(c for c in buckets if c >= int(lengths.sum()))

Packed rows past the token count are zeros. **Overflow**: when the tokens exceed the capacity, the
first ``capacity`` tokens (sequence by sequence) are packed and the rest are *dropped*: their
positions rebuild as zeros, and ``offsets.dropped`` counts them (``offsets.overflow`` is true).
Nothing is written out of bounds. To make overflow an error, check it with ``checkify``::

    from jax.experimental import checkify
    def layer(x, lengths):
        offsets = jaxnorm.padding_offsets(lengths, max_len, capacity)
        jaxnorm.check_capacity(offsets)                      # a checkify check
        ...
    err, y = jax.jit(checkify.checkify(layer))(x, lengths)
    err.throw()                                              # JaxRuntimeError naming the dropped tokens

Lengths are clamped to ``[0, max_len]`` (a traced value cannot be rejected at trace time).

Every copy is linear: each op has a forward-mode rule (jvp) and a transpose (the opposite copy),
so ``grad``, ``jvp``, ``linear_transpose`` and ``vmap`` compose. The bias gradient is a column sum
of the packed cotangent in float32 (an XLA reduction: deterministic, no atomics). The kernels move
16-byte units, write the zeros of padding in the same pass, and never use atomics; the maps come
from one small kernel (a prefix sum per CTA in shared memory).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

import jax
import jax.numpy as jnp
from jax.interpreters import ad, batching

from jaxnorm import _checks
from jaxnorm._ops import pad_offsets_p, pad_pack_p, pad_unpack_p
from jaxnorm._primitive import NOT_MAPPED, empty_placeholder, map_batching

# The offsets kernel keeps batch + 1 prefix sums in one CTA's shared memory.
MAX_SEQUENCES = 32768
LAYOUTS = ("BHLD", "BLHD")
_INT32_LIMIT = 2**31


class PaddingOffsets(NamedTuple):
    """The index maps of one padded batch (a pytree: pass it through jit, vmap, scan).

    Attributes:
      source: int32 ``[capacity]``: the padded position ``b * max_len + l`` of each packed row,
        -1 past ``tokens``.
      position: int32 ``[batch, max_len]``: the packed row of each padded position, -1 for padding
        and for dropped tokens.
      (Maps built or edited by hand: a value outside ``[0, batch * max_len)`` in ``source`` or
      ``[0, capacity)`` in ``position`` is taken as -1, a zero row; nothing is read out of bounds.)
      starts: int32 ``[batch]``: each sequence's first packed row (at most ``capacity``).
      lengths: int32 ``[batch]``: the lengths, clamped to ``[0, max_len]``.
      tokens: int32 scalar: tokens packed (``<= capacity``).
      dropped: int32 scalar: tokens that did not fit (0 unless the capacity overflowed).
    """

    source: jax.Array
    position: jax.Array
    starts: jax.Array
    lengths: jax.Array
    tokens: jax.Array
    dropped: jax.Array

    @property
    def overflow(self):
        return self.dropped > 0

    @property
    def batch(self) -> int:
        return self.position.shape[-2]

    @property
    def max_len(self) -> int:
        return self.position.shape[-1]

    @property
    def capacity(self) -> int:
        return self.source.shape[-1]

    @property
    def cu_seqlens(self):
        """int32 ``[batch + 1]``: ``starts`` followed by ``tokens`` (varlen attention's offsets)."""
        return jnp.concatenate([self.starts, self.tokens[..., None]], axis=-1)


def padding_offsets(lengths, max_len: int, capacity: int) -> PaddingOffsets:
    """The index maps that pack the ``lengths`` tokens of each sequence into ``capacity`` rows.

    Args:
      lengths: integer ``[batch]``: valid tokens per sequence (clamped to ``[0, max_len]``).
      max_len: the padded length (a positive Python int).
      capacity: the packed buffer's rows (a positive Python int); see the module docstring.

    Returns:
      A ``PaddingOffsets``. Tokens are packed sequence by sequence; those past ``capacity`` are
      dropped and counted in ``dropped``.
    """
    fn = "padding_offsets"
    max_len = _positive_int(max_len, fn, "max_len")
    capacity = _positive_int(capacity, fn, "capacity")
    lengths = _array(lengths, fn, "lengths")
    if not jnp.issubdtype(lengths.dtype, jnp.integer):
        raise TypeError(f"{fn}: `lengths` must be an integer array, got {np.dtype(lengths.dtype)}")
    if lengths.ndim != 1:
        raise ValueError(f"{fn}: `lengths` must have shape [batch], got {tuple(lengths.shape)}")
    batch = lengths.shape[0]
    if batch > MAX_SEQUENCES:
        raise ValueError(f"{fn}: at most {MAX_SEQUENCES} sequences, got batch {batch}")
    if batch * max_len >= _INT32_LIMIT or capacity >= _INT32_LIMIT:
        raise ValueError(f"{fn}: batch * max_len ({batch} * {max_len}) and capacity ({capacity}) must be below 2^31")
    lengths = jnp.clip(_checks.int32_clamped(lengths, 0, max_len), 0, max_len)
    source, position, starts, counts = pad_offsets_p.bind(lengths, max_len=max_len, capacity=capacity)
    return PaddingOffsets(source, position, starts, lengths, counts[0], counts[1])


def check_capacity(offsets: PaddingOffsets):
    """A ``checkify`` check that no token was dropped (run the function under ``checkify.checkify``)."""
    from jax.experimental import checkify

    checkify.check(
        offsets.dropped == 0, "jaxnorm: {dropped} tokens did not fit the capacity of {capacity} packed rows",
        dropped=offsets.dropped, capacity=jnp.int32(offsets.capacity),
    )


def remove_padding(x, offsets: PaddingOffsets):
    """``x`` ``[batch, max_len, ...]`` -> ``[capacity, ...]``: the valid tokens, packed; zeros
    past ``offsets.tokens``. Any dtype and trailing shape."""
    fn = "remove_padding"
    offsets = _check_offsets(offsets, fn)
    x = _array(x, fn, "x")
    _check_copyable(x, fn, "x")
    if x.ndim < 2 or tuple(x.shape[:2]) != (offsets.batch, offsets.max_len):
        raise ValueError(
            f"{fn}: `x` must have shape [batch, max_len, ...] = [{offsets.batch}, {offsets.max_len}, ...], "
            f"got {tuple(x.shape)}"
        )
    trailing = tuple(x.shape[2:])
    width = math.prod(trailing)
    if width == 0 or x.size == 0:
        return jnp.zeros((offsets.capacity, *trailing), x.dtype)
    part = x.reshape(offsets.batch, 1, offsets.max_len, width)
    (packed,) = pad_pack_p[1].bind(part, offsets.source, offsets.position, width=width)
    return packed.reshape(offsets.capacity, *trailing)


def rebuild_padding(packed, offsets: PaddingOffsets):
    """``packed`` ``[capacity, ...]`` -> ``[batch, max_len, ...]``, zeros at padding (and at dropped
    tokens). The inverse of ``remove_padding`` when nothing was dropped."""
    fn = "rebuild_padding"
    offsets = _check_offsets(offsets, fn)
    packed = _array(packed, fn, "packed")
    _check_copyable(packed, fn, "packed")
    if packed.ndim < 1 or packed.shape[0] != offsets.capacity:
        raise ValueError(
            f"{fn}: `packed` must have shape [capacity, ...] = [{offsets.capacity}, ...], got {tuple(packed.shape)}"
        )
    trailing = tuple(packed.shape[1:])
    width = math.prod(trailing)
    if width == 0 or offsets.batch == 0:
        return jnp.zeros((offsets.batch, offsets.max_len, *trailing), packed.dtype)
    (out,) = _unpack(1, packed.reshape(offsets.capacity, width), None, offsets, heads=1, head_dim=width)
    return out.reshape(offsets.batch, offsets.max_len, *trailing)


def add_qkv_bias_rebuild_padding(qkv, bias, offsets: PaddingOffsets, num_heads: int, *, layout="BHLD"):
    """Packed QKV projections (+ bias) -> q, k, v in attention layout with zeros at padding.

    Args:
      qkv: ``[capacity, 3 * num_heads * head_dim]`` (q, k, v concatenated, as one fused GEMM
        gives), or a tuple of three ``[capacity, num_heads * head_dim]`` (three GEMMs).
      bias: None, or ``[3 * num_heads * head_dim]`` (or ``[3, num_heads * head_dim]``), added in
        float32 before rounding to ``qkv``'s dtype (float32, bfloat16 or float16 then).
      offsets: from ``padding_offsets``.
      num_heads: H, a positive int dividing the hidden size.
      layout: "BHLD" for ``[batch, H, max_len, head_dim]`` (FasterTransformer's), or "BLHD" for
        ``[batch, max_len, H, head_dim]`` (``jax.nn.dot_product_attention``'s).

    Returns:
      (q, k, v), each in ``layout``, zeros at padding, in one kernel.
    """
    fn = "add_qkv_bias_rebuild_padding"
    offsets = _check_offsets(offsets, fn)
    _check_layout(layout, fn)
    heads = _positive_int(num_heads, fn, "num_heads")
    parts = tuple(qkv) if isinstance(qkv, (tuple, list)) else None
    if parts is not None:
        if len(parts) != 3:
            raise ValueError(f"{fn}: `qkv` as a tuple must hold three arrays (q, k, v), got {len(parts)}")
        parts = tuple(_array(p, fn, "qkv") for p in parts)
        shapes = {tuple(p.shape) for p in parts}
        dtypes = {np.dtype(p.dtype) for p in parts}
        if len(shapes) != 1:
            raise ValueError(f"{fn}: q, k, v must share one shape, got {[tuple(p.shape) for p in parts]}")
        if len(dtypes) != 1:
            raise TypeError(f"{fn}: q, k, v must share one dtype, got {[str(np.dtype(p.dtype)) for p in parts]}")
        first = parts[0]
        hidden = first.shape[-1] * 3 if first.ndim == 2 else None
    else:
        first = _array(qkv, fn, "qkv")
        hidden = first.shape[-1] if first.ndim == 2 else None
    if first.ndim != 2 or first.shape[0] != offsets.capacity:
        what = "[capacity, num_heads * head_dim] each" if parts is not None else "[capacity, 3 * num_heads * head_dim]"
        raise ValueError(f"{fn}: `qkv` must be {what} with capacity {offsets.capacity}, got {tuple(first.shape)}")
    _check_copyable(first, fn, "qkv")
    if hidden % (3 * heads) != 0:
        raise ValueError(f"{fn}: the QKV width {hidden} is not 3 * num_heads * head_dim for num_heads={heads}")
    head_dim = hidden // (3 * heads)
    bias32 = None
    if bias is not None:
        bias = _array(bias, fn, "bias")
        if np.dtype(first.dtype) not in _FLOATS or not jnp.issubdtype(bias.dtype, jnp.floating):
            raise TypeError(f"{fn}: a bias needs float32, bfloat16 or float16 `qkv` and a floating `bias`, got "
                            f"{np.dtype(first.dtype)} and {np.dtype(bias.dtype)}")
        if bias.size != hidden or bias.shape not in ((hidden,), (3, hidden // 3)):
            raise ValueError(f"{fn}: `bias` must have shape [{hidden}] or [3, {hidden // 3}], got {tuple(bias.shape)}")
        bias32 = bias.reshape(hidden).astype(jnp.float32)
    # "BLHD" rows of a part are contiguous: one segment of H * D per position.
    seg_heads, seg_dim = (heads, head_dim) if layout == "BHLD" else (1, heads * head_dim)
    if offsets.batch == 0 or head_dim == 0:
        outs = [jnp.zeros((offsets.batch, seg_heads, offsets.max_len, seg_dim), first.dtype)] * 3
    elif parts is None:
        outs = _unpack(3, first, bias32, offsets, heads=seg_heads, head_dim=seg_dim)
    else:
        third = hidden // 3
        outs = [
            _unpack(1, p, None if bias32 is None else bias32[i * third:(i + 1) * third], offsets,
                    heads=seg_heads, head_dim=seg_dim)[0]
            for i, p in enumerate(parts)
        ]
    if layout == "BLHD":
        outs = [o.reshape(offsets.batch, offsets.max_len, heads, head_dim) for o in outs]
    return tuple(outs)


def transpose_remove_padding(attn_out, offsets: PaddingOffsets, *, layout="BHLD"):
    """Attention output ``[batch, H, max_len, head_dim]`` ("BHLD", or ``[batch, max_len, H,
    head_dim]`` for "BLHD") -> packed ``[capacity, H * head_dim]``, zeros past ``offsets.tokens``.
    (FasterTransformer calls it ``transpose_rebuild_padding``.)"""
    fn = "transpose_remove_padding"
    offsets = _check_offsets(offsets, fn)
    _check_layout(layout, fn)
    x = _array(attn_out, fn, "attn_out")
    _check_copyable(x, fn, "attn_out")
    seq_axis = 2 if layout == "BHLD" else 1
    if x.ndim != 4 or x.shape[0] != offsets.batch or x.shape[seq_axis] != offsets.max_len:
        want = "[batch, H, max_len, head_dim]" if layout == "BHLD" else "[batch, max_len, H, head_dim]"
        raise ValueError(f"{fn}: `attn_out` must be {want} with batch {offsets.batch} and max_len "
                         f"{offsets.max_len} for layout {layout!r}, got {tuple(x.shape)}")
    heads, head_dim = (x.shape[1], x.shape[3]) if layout == "BHLD" else (x.shape[2], x.shape[3])
    width = heads * head_dim
    if width == 0 or offsets.batch == 0:
        return jnp.zeros((offsets.capacity, width), x.dtype)
    if layout == "BLHD":
        x = x.reshape(offsets.batch, 1, offsets.max_len, width)
    (packed,) = pad_pack_p[1].bind(x, offsets.source, offsets.position, width=width)
    return packed


# ---- primitives' rules: the copies are linear in the data (and the bias) ----


def _unpack(parts, packed, bias32, offsets, *, heads, head_dim):
    bias = empty_placeholder() if bias32 is None else bias32
    return pad_unpack_p[parts].bind(packed, bias, offsets.position, offsets.source, heads=heads, head_dim=head_dim)


def _zero_tangents(outs):
    return [ad.Zero(jax.typeof(o).to_tangent_aval()) for o in outs]


def _unpack_jvp(primals, tangents, *, prim, **params):
    packed, bias, position, source = primals
    dpacked, dbias = tangents[:2]
    outs = prim.bind(*primals, **params)
    if type(dpacked) is ad.Zero and type(dbias) is ad.Zero:
        return outs, _zero_tangents(outs)
    dbias = empty_placeholder() if type(dbias) is ad.Zero else dbias
    return outs, prim.bind(ad.instantiate_zeros(dpacked), dbias, position, source, **params)


def _unpack_transpose(cts, packed, bias, position, source, *, parts, heads, head_dim):
    cts = [ad.instantiate_zeros(ct) for ct in cts]
    (dpacked,) = pad_pack_p[parts].bind(*cts, source, position, width=parts * heads * head_dim)
    dbias = None
    if ad.is_undefined_primal(bias) and bias.aval.shape[0]:
        dbias = jnp.sum(dpacked.astype(jnp.float32), axis=0)
    return [dpacked if ad.is_undefined_primal(packed) else None, dbias, None, None]


def _pack_jvp(primals, tangents, *, prim, parts, **params):
    source, position = primals[parts:]
    outs = prim.bind(*primals, **params)
    if all(type(t) is ad.Zero for t in tangents[:parts]):
        return outs, _zero_tangents(outs)
    dparts = [ad.instantiate_zeros(t) for t in tangents[:parts]]
    return outs, prim.bind(*dparts, source, position, **params)


def _pack_transpose(cts, *args, parts, width):
    source, position = args[parts:]
    _, heads, _, head_dim = args[0].aval.shape
    outs = pad_unpack_p[parts].bind(ad.instantiate_zeros(cts[0]), empty_placeholder(), position, source,
                                    heads=heads, head_dim=head_dim)
    return [o if ad.is_undefined_primal(a) else None for o, a in zip(outs, args[:parts])] + [None, None]


def _fold_maps(n, position, source):
    """Per-example maps -> the maps of n * batch sequences over n * capacity rows."""
    batch, max_len = position.shape[1:]
    capacity = source.shape[1]
    ex = jnp.arange(n, dtype=jnp.int32)
    position = jnp.where(position >= 0, position + (ex * capacity)[:, None, None], -1)
    source = jnp.where(source >= 0, source + (ex * (batch * max_len))[:, None], -1)
    return position.reshape(n * batch, max_len), source.reshape(n * capacity)


def _front(a, d, n):
    return jnp.broadcast_to(a, (n, *a.shape)) if d is NOT_MAPPED else jnp.moveaxis(a, d, 0)


def _foldable(n, position, source) -> bool:
    return n * position.size < _INT32_LIMIT and n * source.size < _INT32_LIMIT


def _unpack_batching(args, dims, *, prim, **params):
    """vmap folds the examples into the sequences: one launch over n * batch sequences."""
    n = next(a.shape[d] for a, d in zip(args, dims) if d is not NOT_MAPPED)
    packed, bias, position, source = args
    if dims[1] is not NOT_MAPPED or not _foldable(n, position, source):
        return map_batching(args, dims, prim=prim, **params)
    packed, position, source = (_front(a, d, n) for a, d in zip((packed, position, source), (dims[0], *dims[2:])))
    position, source = _fold_maps(n, position, source)
    outs = prim.bind(packed.reshape(-1, packed.shape[-1]), bias, position, source, **params)
    return [o.reshape(n, -1, *o.shape[1:]) for o in outs], [0] * len(outs)


def _pack_batching(args, dims, *, prim, parts, **params):
    n = next(a.shape[d] for a, d in zip(args, dims) if d is not NOT_MAPPED)
    source, position = args[parts:]
    if not _foldable(n, position, source):
        return map_batching(args, dims, prim=prim, **params)
    moved = [_front(a, d, n) for a, d in zip(args, dims)]
    position, source = _fold_maps(n, moved[parts + 1], moved[parts])
    data = [p.reshape(-1, *p.shape[2:]) for p in moved[:parts]]
    (out,) = prim.bind(*data, source, position, **params)
    return [out.reshape(n, -1, out.shape[-1])], [0]


def _register_rules():
    from functools import partial

    for parts, prim in pad_unpack_p.items():
        ad.primitive_jvps[prim] = partial(_unpack_jvp, prim=prim)
        ad.primitive_transposes[prim] = partial(_unpack_transpose, parts=parts)
        batching.primitive_batchers[prim] = partial(_unpack_batching, prim=prim)
    for parts, prim in pad_pack_p.items():
        ad.primitive_jvps[prim] = partial(_pack_jvp, prim=prim, parts=parts)
        ad.primitive_transposes[prim] = partial(_pack_transpose, parts=parts)
        batching.primitive_batchers[prim] = partial(_pack_batching, prim=prim, parts=parts)


_register_rules()


# ---- argument checks ----

_FLOATS = (np.dtype(np.float32), np.dtype(jnp.bfloat16), np.dtype(np.float16))


def _array(x, fn, name):
    if isinstance(x, PaddingOffsets) or x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"{fn}: `{name}` must be an array, got {type(x).__name__}")
    try:
        return x if hasattr(x, "dtype") and hasattr(x, "shape") else jnp.asarray(x)
    except Exception as e:
        raise TypeError(f"{fn}: `{name}` must be an array, got {type(x).__name__}") from e


def _positive_int(v, fn, name) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{fn}: `{name}` must be a positive Python int (static), got {v!r}")
    if v < 1:
        raise ValueError(f"{fn}: `{name}` must be a positive int, got {v}")
    return int(v)


def _check_offsets(offsets, fn) -> PaddingOffsets:
    if not isinstance(offsets, PaddingOffsets):
        raise TypeError(f"{fn}: `offsets` must be the PaddingOffsets of jaxnorm.padding_offsets, got "
                        f"{type(offsets).__name__}")
    if offsets.source.ndim != 1 or offsets.position.ndim != 2:
        raise ValueError(f"{fn}: `offsets` has maps of shapes {tuple(offsets.source.shape)} and "
                         f"{tuple(offsets.position.shape)}; expected [capacity] and [batch, max_len]")
    return offsets


def _check_copyable(x, fn, name):
    dt = np.dtype(x.dtype)
    if jax.dtypes.itemsize_bits(dt) < 8 or not (jnp.issubdtype(dt, jnp.number) or dt == np.bool_):
        raise TypeError(f"{fn}: `{name}` must hold whole-byte numbers or bools, got {dt}")


def _check_layout(layout, fn):
    if layout not in LAYOUTS:
        raise ValueError(f"{fn}: `layout` must be one of {LAYOUTS}, got {layout!r}")
