"""The specification of every jaxnorm op, in plain jax.numpy.

Each jaxnorm function computes exactly these (up to floating-point rounding): statistics in
float32, or in the input's precision when that is wider (float64 under x64, as the tests use),
output cast back to the input's dtype. The test suite checks every backend against this module.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _axes(x, axis):
    return tuple(range(x.ndim)) if axis is None else axis


def _compute_dtype(x):
    return jnp.promote_types(x.dtype, jnp.float32)


def layer_norm(x, scale=None, bias=None, *, axis=-1, epsilon=1e-6, residual=None, residual_dtype=None,
               scale_offset=0.0):
    """With a residual: (y, h), h = (x + residual) rounded to residual_dtype (x's by default),
    y the norm of h as rounded, in x's dtype. scale_offset is added to scale in the compute dtype."""
    if residual is not None:
        h, hc = _residual_sum(x, residual, residual_dtype)
        return layer_norm(hc, scale, bias, axis=axis, epsilon=epsilon, scale_offset=scale_offset).astype(x.dtype), h
    dt = _compute_dtype(x)
    xf = x.astype(dt)
    mean = jnp.mean(xf, axis=axis, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=axis, keepdims=True)
    y = (xf - mean) * jax.lax.rsqrt(var + epsilon)
    if scale is not None:
        y = y * (scale_offset + scale.astype(dt))
    if bias is not None:
        y = y + bias.astype(dt)
    return y.astype(x.dtype)


def rms_norm(x, scale=None, *, axis=-1, epsilon=1e-6, residual=None, residual_dtype=None, scale_offset=0.0):
    """Residual and scale_offset as for layer_norm."""
    if residual is not None:
        h, hc = _residual_sum(x, residual, residual_dtype)
        return rms_norm(hc, scale, axis=axis, epsilon=epsilon, scale_offset=scale_offset).astype(x.dtype), h
    dt = _compute_dtype(x)
    xf = x.astype(dt)
    ms = jnp.mean(jnp.square(xf), axis=axis, keepdims=True)
    y = xf * jax.lax.rsqrt(ms + epsilon)
    if scale is not None:
        y = y * (scale_offset + scale.astype(dt))
    return y.astype(x.dtype)


def _residual_sum(x, residual, residual_dtype):
    """h = x + residual rounded to its dtype, and h as normalized: as rounded, in the compute dtype
    of x and h (float64 when the tests evaluate the reference in float64). Derivatives pass the
    rounding as the identity in that compute dtype: the gradient of x + residual is the norm's
    gradient plus h's cotangent, rounded once to each input's dtype."""
    h_dtype = x.dtype if residual_dtype is None else residual_dtype
    dt = jnp.promote_types(jnp.promote_types(_compute_dtype(x), _compute_dtype(residual)), jnp.dtype(h_dtype))
    exact = x.astype(dt) + residual.astype(dt)
    # Rounded by reduce_precision, not a cast there and back, which XLA on GPU may drop (excess
    # precision): the reference's y was then the norm of the unrounded sum. reduce_precision
    # flushes what would be subnormal in h's dtype to zero, so where the compute dtype holds h's
    # subnormals as normal numbers (float16 in float32; any in float64) those sums are rounded to
    # the subnormal grid (a power-of-two scaling, exact; jnp.round ties to even, as IEEE does).
    fi = jnp.finfo(h_dtype)
    rounded = jax.lax.reduce_precision(exact, exponent_bits=fi.nexp, mantissa_bits=fi.nmant)
    if float(fi.smallest_subnormal) >= float(jnp.finfo(dt).smallest_normal):
        tiny = jnp.asarray(fi.smallest_subnormal, dt)
        subnormal = jnp.abs(exact) < jnp.asarray(fi.smallest_normal, dt)
        rounded = jnp.where(subnormal, jnp.round(exact / tiny) * tiny, rounded)
    hc = exact + jax.lax.stop_gradient(rounded - exact)
    return hc.astype(h_dtype), hc


def softmax(x, axis=-1, where=None):
    return jax.nn.softmax(x.astype(_compute_dtype(x)), axis=_axes(x, axis), where=where).astype(x.dtype)


def log_softmax(x, axis=-1, where=None):
    return jax.nn.log_softmax(x.astype(_compute_dtype(x)), axis=_axes(x, axis), where=where).astype(x.dtype)


def softmax_cross_entropy(logits, labels, *, axis=-1, where=None, label_smoothing=0.0, z_loss=0.0,
                          ignore_index=None, reduction=None):
    """Per row with the kept classes K, n = |K|: (1 - eps) (lse - x_y) + eps (lse - mean(x[K]))
    + z_loss lse^2, lse = logsumexp(x[K]); 0 where the label is ignore_index or nothing is kept
    (optax's convention), NaN where the label is outside [0, n_classes). Computed in the input's
    precision or float32, whichever is wider. `where` of the labels' shape drops whole rows.
    reduction "sum": the rows' sum; "mean": that sum over the rows neither ignored nor dropped by
    a labels-shaped `where`."""
    loss = _cross_entropy_rows(logits, labels, axis=axis, where=where, label_smoothing=label_smoothing,
                               z_loss=z_loss, ignore_index=ignore_index)
    if reduction is None:
        return loss
    total = jnp.sum(loss)
    if reduction == "sum":
        return total
    counted = jnp.ones(labels.shape, bool)
    if where is not None and jnp.ndim(where) < logits.ndim and jnp.shape(where) == labels.shape:
        counted = jnp.asarray(where, bool)
    if ignore_index is not None:
        counted = counted & (labels != ignore_index)
    return total / jnp.sum(counted)


def _cross_entropy_rows(logits, labels, *, axis, where, label_smoothing, z_loss, ignore_index):
    axes = [a % logits.ndim for a in ((axis,) if isinstance(axis, int) else axis)]  # labels index in this order
    batch = [i for i in range(logits.ndim) if i not in axes]
    dt = _compute_dtype(logits)
    x = jnp.transpose(logits, batch + axes).astype(dt)
    x = x.reshape(*labels.shape, -1)
    cols = x.shape[-1]
    row_keep = None
    if where is not None and jnp.ndim(where) < logits.ndim and jnp.shape(where) == labels.shape:
        row_keep, where = jnp.asarray(where, bool), None
    if where is not None:
        where = jnp.broadcast_to(jnp.asarray(where, bool), logits.shape)
        where = jnp.transpose(where, batch + axes).reshape(x.shape)
    live = jnp.ones(labels.shape, bool) if where is None else jnp.any(where, axis=-1)
    if row_keep is not None:
        live = live & row_keep
    if ignore_index is not None:
        live = live & (labels != ignore_index)
    x = jnp.where(live[..., None], x, 0)  # a row without loss has no gradient, whatever its logits
    lse = jax.nn.logsumexp(x, axis=-1, where=where)
    valid = (labels >= 0) & (labels < cols)
    x_y = jnp.take_along_axis(x, jnp.clip(labels, 0, cols - 1)[..., None].astype(jnp.int32), axis=-1)[..., 0]
    loss = (1 - label_smoothing) * (lse - x_y)
    if label_smoothing:
        kept = jnp.ones(x.shape, bool) if where is None else where
        mean = jnp.sum(jnp.where(kept, x, 0), axis=-1) / jnp.sum(kept, axis=-1)
        loss = loss + label_smoothing * (lse - mean)
    if z_loss:
        loss = loss + z_loss * lse**2
    # An out-of-range label: NaN loss and a NaN gradient row (a product, which the gradient
    # passes, where jnp.where would pass 0).
    loss = loss * jnp.where(valid | ~live, 1.0, jnp.nan).astype(loss.dtype)
    return jnp.where(live, loss, 0.0)


# ----------------------------------------------------------------------------------------------
# Sampling (jaxnorm.sampling states the conventions in words; this is the definition).


def _row_param(value, batch, default):
    v = default if value is None else value
    return jnp.broadcast_to(jnp.asarray(v), batch)[..., None]


def _sampling_values(logits, axis):
    """(v, m, s-less): logits moved to the last axis, NaN as -inf, a +inf row's +inf tokens as 0
    and the rest -inf; and each row's maximum."""
    x = jnp.moveaxis(logits, axis, -1).astype(_compute_dtype(logits))
    v = jnp.where(jnp.isnan(x), -jnp.inf, x)
    m = jnp.max(v, axis=-1, keepdims=True)
    inf_row = m == jnp.inf
    v = jnp.where(inf_row, jnp.where(v == jnp.inf, 0.0, -jnp.inf), v)
    return v, jnp.where(inf_row, 0.0, m)


def with_bias(logits, bias, axis=-1):
    """The logits the sampler sees: ``logits + bias`` (bias along ``axis``) computed in float32,
    or ``logits`` unchanged without a bias."""
    if bias is None:
        return logits
    x = jnp.moveaxis(logits, axis, -1).astype(jnp.float32) + jnp.asarray(bias).astype(jnp.float32)
    return jnp.moveaxis(x, -1, axis)


def sampling_mask(logits, *, temperature=1.0, top_k=None, top_p=None, min_p=None, axis=-1, bias=None):
    """Which tokens ``jaxnorm.sample`` may draw (boolean, vocabulary axis moved last).

    Per row, with v the logits (``with_bias(logits, bias)``, NaN as -inf), m = max(v),
    s = (v - m) / temperature:
      greedy (temperature <= 0): every token (the sampler takes the argmax);
      top-k (1 <= k < vocab): v >= the k-th largest v;
      top-p (p < 1): the mass of strictly larger tokens within the top-k set, in
        softmax(s) renormalized over that set, is below p (the top value always stays);
      min-p: s >= log(min_p), with min_p <= 0 (or NaN) off and min_p >= 1 as 1;
    a temperature above 2^126 (inf included) acts as 2^126 (a -inf logit stays -inf, not NaN).
    """
    v, m = _sampling_values(with_bias(logits, bias, axis), axis)
    batch, vocab = v.shape[:-1], v.shape[-1]
    t = _temperature(temperature, batch, v.dtype)
    greedy = ~(t > 0) | ~(1 / t.astype(jnp.float32) < jnp.inf)
    s = jnp.where(greedy, 0.0, (v - m) / jnp.where(greedy, 1.0, t))

    k = _row_param(top_k, batch, 0)
    use_k = (k >= 1) & (k < vocab) & ~greedy
    desc = -jnp.sort(-v, axis=-1)
    kth = jnp.take_along_axis(desc, jnp.clip(k - 1, 0, vocab - 1), axis=-1)
    keep = jnp.where(use_k, v >= kth, True)

    p = _row_param(top_p, batch, 1.0).astype(v.dtype)
    use_p = ~(p >= 1) & ~jnp.isnan(p) & ~greedy
    w = jnp.where(keep, jnp.exp(s), 0.0)
    # Mass of strictly larger values: the total minus the mass of values <= v (ascending sort).
    order = jnp.argsort(v, axis=-1)
    v_asc = jnp.take_along_axis(v, order, axis=-1)
    cum = jnp.cumsum(jnp.take_along_axis(w, order, axis=-1), axis=-1)
    last_le = jax.vmap(lambda a, q: jnp.searchsorted(a, q, side="right"))(
        v_asc.reshape(-1, vocab), v.reshape(-1, vocab)).reshape(v.shape) - 1
    z = cum[..., -1:]
    above = z - jnp.take_along_axis(cum, last_le, axis=-1)
    keep_p = (above < jnp.maximum(p, 0.0) * z) | (v == m)
    keep = keep & jnp.where(use_p, keep_p, True)

    mp = _row_param(min_p, batch, 0.0).astype(v.dtype)
    log_mp = jnp.where(mp > 0, jnp.log(jnp.minimum(mp, 1.0)), -jnp.inf)  # NaN compares false: off
    keep = keep & jnp.where(greedy, True, s >= log_mp)
    return keep


def _temperature(temperature, batch, dtype):
    return jnp.minimum(_row_param(temperature, batch, 1.0).astype(dtype), 2.0**126)  # NaN stays NaN: greedy


def sampling_probs(logits, *, temperature=1.0, top_k=None, top_p=None, min_p=None, axis=-1, bias=None):
    """The exact distribution ``jaxnorm.sample`` draws from (vocabulary axis last) for a row that
    is not finished: the filtered softmax of ``with_bias(logits, bias)`` / temperature, one-hot
    at the first argmax for greedy rows, all zero for a row with no finite logit (where the
    sampler returns -1)."""
    logits = with_bias(logits, bias, axis)
    v, m = _sampling_values(logits, axis)
    keep = sampling_mask(logits, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, axis=axis)
    t = _temperature(temperature, v.shape[:-1], v.dtype)
    greedy = ~(t > 0) | ~(1 / t.astype(jnp.float32) < jnp.inf)
    w = jnp.where(keep, jnp.exp((v - m) / jnp.where(greedy, 1.0, t)), 0.0)
    probs = w / jnp.sum(w, axis=-1, keepdims=True)
    onehot = jax.nn.one_hot(jnp.argmax(v, axis=-1), v.shape[-1], dtype=v.dtype)
    probs = jnp.where(greedy, onehot, probs)
    return jnp.where(m == -jnp.inf, 0.0, probs)


def sample(key, logits, *, temperature=1.0, top_k=None, top_p=None, min_p=None, axis=-1, bias=None,
           finished=None, end_id=None):
    """A sort-based sampler of the same distribution (not the same random stream). A finished
    row's distribution is a point mass on its end_id: it returns end_id as given."""
    probs = sampling_probs(logits, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, axis=axis,
                           bias=bias)
    tok = jax.random.categorical(key, jnp.log(probs), axis=-1)
    tok = jnp.where(jnp.sum(probs, axis=-1) > 0, tok, -1).astype(jnp.int32)
    if finished is not None:
        tok = jnp.where(finished, jnp.asarray(end_id, jnp.int32), tok)
    return tok


def filter_logits(logits, *, top_k=None, top_p=None, min_p=None, axis=-1, bias=None):
    """The kept entries of ``with_bias(logits, bias)``, rounded to the logits' dtype."""
    x = with_bias(logits, bias, axis)
    keep = sampling_mask(x, top_k=top_k, top_p=top_p, min_p=min_p, axis=axis)
    v, _ = _sampling_values(x, axis)
    x = jnp.moveaxis(x, axis, -1)
    return jnp.moveaxis(jnp.where(keep & (v > -jnp.inf), x, -jnp.inf).astype(logits.dtype), -1, axis)


def top_k(operand, k):
    return jax.lax.top_k(operand, k)


# ---- padding removal: plain gathers and scatters on the same maps ----


def padding_offsets(lengths, max_len, capacity):
    """Tokens packed sequence by sequence; those past ``capacity`` dropped (position -1)."""
    from jaxnorm.padding import PaddingOffsets

    lengths = jnp.asarray(lengths)
    if jnp.iinfo(lengths.dtype).bits < 32:  # widened first: max_len would wrap in a narrow dtype
        lengths = lengths.astype(jnp.int32)
    lengths = jnp.clip(lengths, 0, max_len).astype(jnp.int32)
    batch = lengths.shape[0]
    ends = jnp.cumsum(lengths)
    starts = ends - lengths
    t = jnp.arange(max_len, dtype=jnp.int32)
    row = starts[:, None] + t
    kept = (t < lengths[:, None]) & (row < capacity)
    position = jnp.where(kept, row, -1)
    padded_index = jnp.arange(batch * max_len, dtype=jnp.int32).reshape(batch, max_len)
    source = jnp.full((capacity,), -1, jnp.int32).at[jnp.where(kept, row, capacity)].set(padded_index, mode="drop")
    total = ends[-1] if batch else jnp.int32(0)
    tokens = jnp.minimum(total, capacity).astype(jnp.int32)
    return PaddingOffsets(source, position, jnp.minimum(starts, capacity), lengths, tokens,
                          (total - tokens).astype(jnp.int32))


def _gather_rows(rows, index):
    """rows[index], a zero row where index is -1 (padding) or, in a map built by hand, past the
    rows."""
    got = rows[jnp.clip(index, 0, rows.shape[0] - 1)]
    keep = ((index >= 0) & (index < rows.shape[0])).reshape(index.shape + (1,) * (rows.ndim - 1))
    return jnp.where(keep, got, jnp.zeros((), rows.dtype))


def remove_padding(x, offsets):
    return _gather_rows(x.reshape(x.shape[0] * x.shape[1], *x.shape[2:]), offsets.source)


def rebuild_padding(packed, offsets):
    return _gather_rows(packed, offsets.position)


def add_qkv_bias_rebuild_padding(qkv, bias, offsets, num_heads, *, layout="BHLD"):
    if isinstance(qkv, (tuple, list)):
        qkv = jnp.concatenate(qkv, axis=-1)
    if bias is not None:
        qkv = (qkv.astype(jnp.float32) + bias.reshape(-1).astype(jnp.float32)).astype(qkv.dtype)
    full = rebuild_padding(qkv, offsets)  # [B, L, 3 * H * D]
    b, l, w = full.shape
    parts = full.reshape(b, l, 3, num_heads, w // (3 * num_heads))
    if layout == "BHLD":
        parts = parts.transpose(2, 0, 3, 1, 4)
    else:
        parts = parts.transpose(2, 0, 1, 3, 4)
    return tuple(parts)


def transpose_remove_padding(attn_out, offsets, *, layout="BHLD"):
    if layout == "BHLD":
        attn_out = attn_out.transpose(0, 2, 1, 3)
    b, l, h, d = attn_out.shape
    return remove_padding(attn_out.reshape(b, l, h * d), offsets)


def decode_attention(q, k_cache, v_cache, lengths, *, k_new=None, v_new=None, scale=None, layout="BHLD"):
    """One decoding step: query head h attends with kv head h // (q_heads // kv_heads) to the
    positions < lengths[b] of its cache, then to (k_new, v_new) when given, which are written at
    position lengths[b]. Returns out [B, Hq, D] (zeros when nothing is attended; NaN for a length
    outside [0, max_len], or [0, max_len - 1] when appending), plus the updated caches when
    appending."""
    if layout == "BLHD":
        k_cache, v_cache = k_cache.transpose(0, 2, 1, 3), v_cache.transpose(0, 2, 1, 3)
    b, hq, d = q.shape
    hkv, max_len = k_cache.shape[1], k_cache.shape[2]
    dt = _compute_dtype(q)
    scale = d**-0.5 if scale is None else scale
    append = k_new is not None
    valid = (lengths >= 0) & (lengths <= max_len - (1 if append else 0))
    keys, values = k_cache, v_cache
    if append:
        at = jnp.arange(max_len)[None, None, :, None] == lengths[:, None, None, None]
        keys = jnp.where(at & valid[:, None, None, None], k_new[:, :, None, :], k_cache)
        values = jnp.where(at & valid[:, None, None, None], v_new[:, :, None, :], v_cache)
    n = lengths + (1 if append else 0)
    qg = q.reshape(b, hkv, hq // hkv, d).astype(dt)
    # Full float32 products: GPUs would otherwise take float32 dots in TF32 (10-bit mantissas).
    s = jnp.einsum("bhgd,bhld->bhgl", qg, keys.astype(dt), precision="highest") * scale
    attended = jnp.arange(max_len)[None, :] < n[:, None]
    mask = attended[:, None, None, :]
    s = jnp.where(mask, s, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True, initial=-jnp.inf)
    e = jnp.where(mask, jnp.exp(s - jnp.where(jnp.isfinite(m), m, 0)), 0)
    tot = jnp.sum(e, axis=-1, keepdims=True)
    # Positions past n are never read: a non-finite value there must not meet e's zeros.
    read = jnp.where(attended[:, None, :, None], values.astype(dt), 0)
    o = jnp.einsum("bhgl,bhld->bhgd", e, read, precision="highest") / jnp.where(tot > 0, tot, 1)
    o = jnp.where(valid[:, None, None, None], o, jnp.nan).reshape(b, hq, d).astype(q.dtype)
    if not append:
        return o
    if layout == "BLHD":
        keys, values = keys.transpose(0, 2, 1, 3), values.transpose(0, 2, 1, 3)
    return o, keys, values


# ---- embedding lookup + position encoding (jaxnorm.embedding states the conventions in words) ----

SINE_MAX_TIMESCALE = 10000.0


def sine_inv_timescales(d):
    """float32 ``[d // 2]``: ``exp(-i * log(10000) / max(d / 2 - 1, 1))`` (tensor2tensor's
    ``get_timing_signal_1d``, FasterTransformer's ``sine_position_encoder``), computed in float64
    and rounded once; the kernels read these same numbers."""
    import math

    import numpy as np

    half = d // 2
    increment = math.log(SINE_MAX_TIMESCALE) / max(half - 1, 1)
    return np.exp(-np.arange(half, dtype=np.float64) * increment).astype(np.float32)


def sine_position_encoding(position, d):
    """float32 ``[..., d]``: ``[sin(p * inv), cos(p * inv)]`` with ``p = float32(position)``."""
    angle = jnp.asarray(position).astype(jnp.float32)[..., None] * sine_inv_timescales(d)
    return jnp.concatenate([jnp.sin(angle), jnp.cos(angle)], axis=-1)


def embed_with_position(ids, table, *, position, scale=None, pos_table=None):
    """``table[clip(ids)] * scale + PE(position)`` in float32, rounded once to the table's dtype."""
    import math

    import numpy as np

    d = table.shape[-1]
    scale = np.float32(math.sqrt(d) if scale is None else scale)
    ids = jnp.asarray(ids)
    position = jnp.broadcast_to(jnp.asarray(position), ids.shape)
    rows = table[jnp.clip(ids, 0, table.shape[0] - 1)].astype(jnp.float32) * scale
    if pos_table is None:
        pe = sine_position_encoding(position, d)
    else:
        pe = pos_table[jnp.clip(position, 0, pos_table.shape[0] - 1)].astype(jnp.float32)
    return (rows + pe).astype(table.dtype)


# ---- causal linear attention (jaxnorm.linear_attention states the conventions in words) ----


def linear_attention_feature_map(x, feature_map="elu+1"):
    """``elu(x) + 1``, the identity, or a callable, in the compute dtype."""
    dt = _compute_dtype(x)
    if callable(feature_map):
        return feature_map(x).astype(dt)
    xf = x.astype(dt)
    return jax.nn.elu(xf) + 1 if feature_map == "elu+1" else xf


def linear_attention(q, k, v, *, causal=True, feature_map="elu+1", normalize=True, eps=1e-6):
    """The quadratic masked form, ``[batch, heads, len, d]``: scores ``phi(q) phi(k)^T``, lower
    triangle (causal) or all, times v; divided by the scores' row sums + eps (``normalize``)."""
    dt = _compute_dtype(q)
    qm, km = linear_attention_feature_map(q, feature_map), linear_attention_feature_map(k, feature_map)
    a = jnp.einsum("bhik,bhjk->bhij", qm, km, precision="highest")
    vd = v.astype(dt)
    if causal:
        n = q.shape[2]
        keep = jnp.tril(jnp.ones((n, n), bool))
        a = jnp.where(keep, a, 0)
        # A product with the masked zeros would carry a later non-finite v back to earlier
        # positions (0 * inf): with one, the masked sum of products, per (i, j) pair.
        out = jax.lax.cond(
            jnp.isfinite(vd).all(),
            lambda: jnp.einsum("bhij,bhjv->bhiv", a, vd, precision="highest"),
            lambda: jnp.where(keep[..., None], a[..., None] * vd[:, :, None], 0).sum(3))
    else:
        out = jnp.einsum("bhij,bhjv->bhiv", a, vd, precision="highest")
    if normalize:
        out = out / (a.sum(-1, keepdims=True) + eps)
    return out.astype(q.dtype)


def linear_attention_state(k, v, feature_map="elu+1"):
    """The state after the last position: ``(S = phi(K)^T V, z = sum_j phi(k_j))``."""
    km = linear_attention_feature_map(k, feature_map)
    return (jnp.einsum("bhlk,bhlv->bhkv", km, v.astype(km.dtype), precision="highest"), km.sum(axis=2))


def linear_attention_recurrent(q, k, v, *, feature_map="elu+1", normalize=True, eps=1e-6, state=None):
    """The causal form as the recurrence over positions (a scan): for long sequences, where the
    quadratic form does not fit. Returns ``(out, (S, z))``."""
    dt = _compute_dtype(q)
    qm, km = linear_attention_feature_map(q, feature_map), linear_attention_feature_map(k, feature_map)
    b, h, _, dk = q.shape
    dv = v.shape[3]
    if state is None:
        state = (jnp.zeros((b, h, dk, dv), dt), jnp.zeros((b, h, dk), dt))

    def step(carry, x):
        s, z = carry
        qi, ki, vi = x
        s = s + ki[..., :, None] * vi[..., None, :]
        z = z + ki
        num = jnp.einsum("bhk,bhkv->bhv", qi, s, precision="highest")
        if normalize:
            num = num / (jnp.einsum("bhk,bhk->bh", qi, z, precision="highest")[..., None] + eps)
        return (s, z), num

    xs = tuple(jnp.moveaxis(x, 2, 0) for x in (qm, km, v.astype(dt)))
    state, out = jax.lax.scan(step, tuple(s.astype(dt) for s in state), xs)
    return jnp.moveaxis(out, 0, 2).astype(q.dtype), state
