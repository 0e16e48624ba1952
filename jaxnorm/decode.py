"""One decoding step of attention over a KV cache (FasterTransformer's masked self-attention,
flash-decoding's split over the sequence), with the new token appended to the cache in place.

**Cache layout.** ``k_cache`` and ``v_cache`` are ``[batch, kv_heads, max_len, head_dim]``
(``layout="BHLD"``, the default) or ``[batch, max_len, kv_heads, head_dim]`` (``"BLHD"``, the
layout of ``jax.nn.dot_product_attention``). ``lengths[b]`` counts the valid positions of sequence
b: it attends to positions ``< lengths[b]``, and never reads the rest of the cache.

**Appending in place.** With ``k_new``/``v_new`` the op writes them at position ``lengths[b]`` and
attends including them; it returns ``(out, k_cache, v_cache)``. The returned caches *alias* the
operands: in a ``lax.while_loop``/``scan`` carrying the caches, or under ``jax.jit(...,
donate_argnums=...)`` with the caches donated, XLA updates them in place and never copies them.
If the caller keeps using the old caches, XLA copies them first (correct, but a full cache copy).

**Lengths are checked by the kernel** (a traced value cannot be checked at trace time): a length
outside ``[0, max_len]`` (``[0, max_len - 1]`` when appending, which needs room for the token)
gives NaN outputs for that sequence and leaves its cache untouched. A sequence with nothing to
attend (length 0, nothing appended) gives zeros.

Forward only: decoding does not differentiate through the cache (``jax.grad`` raises).

Grouped-query attention: query head ``h`` uses kv head ``h // (q_heads // kv_heads)`` (as
``jax.nn.dot_product_attention`` does); each cache row is read once for all query heads sharing it.
Scores and the softmax are float32 whatever the cache dtype; the output has q's dtype.
"""

from __future__ import annotations

import numpy as np

import jax
import jax.numpy as jnp
from jax.interpreters import ad

from jaxnorm import _checks
from jaxnorm._ops import decode_append_p, decode_p

HEAD_DIMS = (64, 128, 256)
LAYOUTS = ("BHLD", "BLHD")
# The CUDA handler splits each sequence so that its grid is one wave of resident CTAs (it knows
# the GPU's SM count and the kernel's occupancy); here only the most splits it may take is fixed,
# which sizes its workspace: enough for 1024 resident CTAs (H100: 132 SMs x 2-3), at most 64, and
# at least 64 positions a split.
_MAX_CTAS = 1024
_MIN_SPLIT = 64
_MAX_SPLITS = 64


def decode_splits(batch: int, kv_heads: int, max_len: int) -> int:
    """The most parts the CUDA kernel may cut each sequence into (sizes its workspace; a function
    of the shapes only). A CTA per kv head at least, whatever the group size."""
    ctas = max(1, batch * kv_heads)
    return max(1, min(_MAX_SPLITS, -(-max_len // _MIN_SPLIT), -(-_MAX_CTAS // ctas)))


def decode_attention(q, k_cache, v_cache, lengths, *, k_new=None, v_new=None, scale=None, layout="BHLD"):
    """Attention of one new query per sequence over its KV cache.

    Args:
      q: ``[batch, q_heads, head_dim]``, float32, bfloat16 or float16; head_dim 64, 128 or 256.
      k_cache, v_cache: the caches in ``layout`` (see the module docstring), q's dtype;
        ``kv_heads`` must divide ``q_heads``.
      lengths: int ``[batch]``, valid positions per sequence.
      k_new, v_new: optional ``[batch, kv_heads, head_dim]``: the new token's key and value,
        appended at ``lengths[b]`` (both or neither).
      scale: softmax scale, default ``head_dim ** -0.5``.
      layout: ``"BHLD"`` or ``"BLHD"``.

    Returns:
      ``out [batch, q_heads, head_dim]``; with k_new/v_new, ``(out, k_cache, v_cache)`` with the
      caches updated in place.
    """
    fn = "decode_attention"
    q = _checks.as_array(q, fn, "q")
    k_cache = _checks.as_array(k_cache, fn, "k_cache")
    v_cache = _checks.as_array(v_cache, fn, "v_cache")
    lengths = _checks.as_array(lengths, fn, "lengths")
    _checks.check_input_dtype(q, fn, "q")
    if layout not in LAYOUTS:
        raise ValueError(f"{fn}: `layout` must be one of {LAYOUTS}, got {layout!r}")
    if q.ndim != 3:
        raise ValueError(f"{fn}: `q` must be [batch, q_heads, head_dim], got shape {tuple(q.shape)}")
    batch, q_heads, head_dim = q.shape
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"{fn}: head_dim (q's last axis) must be one of {HEAD_DIMS}, got {head_dim}")
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if c.dtype != q.dtype:
            raise TypeError(f"{fn}: `{name}` must have q's dtype {np.dtype(q.dtype)}, got {np.dtype(c.dtype)}")
        if c.ndim != 4 or c.shape[0] != batch or c.shape[3] != head_dim:
            want = "[batch, kv_heads, max_len, head_dim]" if layout == "BHLD" else "[batch, max_len, kv_heads, head_dim]"
            raise ValueError(f"{fn}: `{name}` must be {want} with batch {batch} and head_dim {head_dim} "
                             f"(q's shape {tuple(q.shape)}), got shape {tuple(c.shape)}")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"{fn}: `v_cache` must have k_cache's shape {tuple(k_cache.shape)}, got {tuple(v_cache.shape)}")
    kv_heads, max_len = (k_cache.shape[1], k_cache.shape[2]) if layout == "BHLD" else (k_cache.shape[2], k_cache.shape[1])
    if kv_heads == 0 or q_heads % kv_heads:
        raise ValueError(f"{fn}: kv_heads ({kv_heads}, from k_cache's shape {tuple(k_cache.shape)}) must divide "
                         f"q_heads ({q_heads})")
    if not jnp.issubdtype(lengths.dtype, jnp.integer):
        raise TypeError(f"{fn}: `lengths` must be integers, got {np.dtype(lengths.dtype)}")
    if lengths.shape != (batch,):
        raise ValueError(f"{fn}: `lengths` must be [batch] = ({batch},), got shape {tuple(lengths.shape)}")
    if (k_new is None) != (v_new is None):
        raise ValueError(f"{fn}: pass both `k_new` and `v_new`, or neither")
    append = k_new is not None
    if append:
        k_new = _checks.as_array(k_new, fn, "k_new")
        v_new = _checks.as_array(v_new, fn, "v_new")
        for name, n in (("k_new", k_new), ("v_new", v_new)):
            if n.shape != (batch, kv_heads, head_dim):
                raise ValueError(f"{fn}: `{name}` must be [batch, kv_heads, head_dim] = {(batch, kv_heads, head_dim)}, "
                                 f"got {tuple(n.shape)}")
            if n.dtype != q.dtype:
                raise TypeError(f"{fn}: `{name}` must have q's dtype {np.dtype(q.dtype)}, got {np.dtype(n.dtype)}")
        if max_len == 0:
            raise ValueError(f"{fn}: appending needs a cache with max_len >= 1, got shape {tuple(k_cache.shape)}")
    if max_len >= 2**31 - 1:
        raise ValueError(f"{fn}: max_len must be below 2^31 - 1, got {max_len}")
    scale = head_dim**-0.5 if scale is None else _checks.static_float(scale, fn, "scale")
    if not np.isfinite(scale):
        raise ValueError(f"{fn}: `scale` must be finite, got {scale!r}")
    params = dict(scale=float(scale), splits=decode_splits(batch, kv_heads, max_len),
                  blhd=layout == "BLHD")
    lengths = _checks.int32_clamped(lengths, -1, max_len + 1)  # out of range stays out of range
    if batch == 0 or q_heads == 0:
        out = jnp.zeros(q.shape, q.dtype)
        return (out, k_cache, v_cache) if append else out
    if append:
        return tuple(decode_append_p.bind(q, k_cache, v_cache, lengths, k_new, v_new, **params))
    (out,) = decode_p.bind(q, k_cache, v_cache, lengths, **params)
    return out


def _forward_only(primals, tangents, **params):
    raise NotImplementedError(
        "jaxnorm.decode_attention is forward-only (one decoding step); differentiate training "
        "attention with jax.nn.dot_product_attention")


ad.primitive_jvps[decode_p] = _forward_only
ad.primitive_jvps[decode_append_p] = _forward_only
