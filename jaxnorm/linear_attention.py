"""Causal linear attention ("Transformers are RNNs", Katharopoulos et al. 2020): with a feature
map phi, softmax attention becomes

    out_i = phi(q_i) . S_i / (phi(q_i) . z_i + eps),   S_i = sum_{j<=i} phi(k_j)^T v_j,
                                                       z_i = sum_{j<=i} phi(k_j),

linear in the sequence length. The kernel never forms S_i per position: it walks each sequence
in chunks of 64 positions, the products inside a chunk on tensor cores (16-bit inputs) and the
state S, z carried in float32 from chunk to chunk; a few long sequences are cut into parts whose
states are summed in a fixed order, so the GPU stays full and results stay bitwise reproducible.

**One multilinear kernel.** The kernel computes, for the rows (batch x heads),
``num_i = sum_{j<=i} s(i, j) c_j`` and ``den_i = sum_{j<=i} s(i, j)`` (or over ``j >= i``) with
the score ``s(i, j) = a_i . b_j`` (``+ alpha_i beta_j`` in its rank-1 form). The forward is
``(a, b, c) = (phi(q), phi(k), v)``; each derivative is the same kernel with the operands
permuted (``dq = K(dnum, v, k)``, ``dk = K'(v, dnum, q)``, ``dv = K'(k, q, dnum)``, K' summing
over ``j >= i``), the normalizer's cotangent riding on the rank-1 term. So forward mode, reverse
mode and higher orders all run the kernel, and nothing per position is ever stored beyond the
inputs, the output and ``den``.

**Precision.** Sums and the state are float32. With 16-bit inputs, the chunk's scores
``phi(q) phi(k)^T`` and the state are rounded to the input dtype before their products with v
and q (as FlashAttention rounds its probabilities), so expect the input dtype's precision
(about 3 significant digits for bfloat16) at every length; float32 inputs are computed in
float32 throughout. The normalizer ``den + eps`` is float32. float16 has no exponent range to
spare: the kernel scales the chunk's scores and the state by powers of two before rounding,
forward mode's tangent launches return float32 numerators, and the backward brings the
normalizer's cotangent to unit scale before the kernel rounds it.

The non-causal form ``phi(Q) (phi(K)^T V) / (phi(Q) . sum_j phi(k_j))`` is two matrix products,
which XLA already runs on tensor cores: ``causal=False`` computes it with jnp.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

import jax
import jax.numpy as jnp
from jax.interpreters import ad

from jaxnorm import _checks
from jaxnorm._ops import linear_attention_p, linear_attention_rank1_p
from jaxnorm._partition import gathered, merge_axes

HEAD_DIMS = (32, 64, 128, 256)
LAYOUTS = ("BHLD", "BLHD")
FEATURE_MAPS = ("elu+1", "identity")
CHUNK = 64  # positions a CTA step takes (the kernels' chunk)


def _bind(a, b, c, alpha=None, beta=None, *, normalize=False, eps=0.0, reverse=False, f32_out=False):
    """The kernel on [rows, len, d] operands (with the rank-1 score term when alpha and beta are
    given): (num or out, in a's dtype or float32; den float32)."""
    params = dict(normalize=bool(normalize), eps=float(eps), reverse=bool(reverse), f32_out=bool(f32_out))
    if alpha is None:
        return linear_attention_p.bind(a, b, c, **params)
    return linear_attention_rank1_p.bind(a, b, c, alpha.astype(jnp.float32), beta.astype(jnp.float32), **params)


def _cumsum(x, reverse):
    return jnp.flip(jnp.cumsum(jnp.flip(x, 1), axis=1), 1) if reverse else jnp.cumsum(x, axis=1)


def _as(x, dtype):
    return x.astype(dtype) if x.dtype != dtype else x


def _aval(x):
    return x.aval if ad.is_undefined_primal(x) else x


def _zeros(x):
    return jnp.zeros(_aval(x).shape, _aval(x).dtype)


def _jvp(primals, tangents, *, normalize, eps, reverse, f32_out):
    """The kernel is linear in (a, alpha), in (b, beta) and in c: one kernel call per nonzero pair,
    its numerator in float32 (in float16 the unnormalized sums outgrow the range)."""
    rank1 = len(primals) == 5
    prim = linear_attention_rank1_p if rank1 else linear_attention_p
    out, den = prim.bind(*primals, normalize=normalize, eps=eps, reverse=reverse, f32_out=f32_out)
    zero = [type(t) is ad.Zero for t in tangents]
    dnum = dden = None
    pairs = ((0, 3), (1, 4)) if rank1 else ((0,), (1,))
    for group in (*pairs, (2,)):
        if all(zero[i] for i in group):
            continue
        ops = list(primals)
        for i in group:
            ops[i] = _zeros(primals[i]) if zero[i] else _as(tangents[i], primals[i].dtype)
        tn, td = prim.bind(*ops, normalize=False, eps=0.0, reverse=reverse, f32_out=True)
        dnum = tn if dnum is None else dnum + tn
        if group != (2,):  # den does not depend on c
            dden = td if dden is None else dden + td
    if dnum is None:
        return (out, den), (ad.Zero.from_primal_value(out), ad.Zero.from_primal_value(den))
    if dden is None:
        dden = jnp.zeros_like(den)
    if normalize:
        dout = (dnum - out.astype(jnp.float32) * dden[..., None]) / (den[..., None] + eps)
    else:
        dout = dnum
    return (out, den), (dout.astype(out.dtype), dden)


def _unit_shift(x):
    """The power of two (an exponent, float32) that brings max |x| near 1: 0 for an all-zero or
    non-finite x, whose values the scaling must not change."""
    top = jnp.max(jnp.abs(x))
    ok = (top > 0) & jnp.isfinite(top)
    return jnp.where(ok, jnp.round(jnp.log2(jnp.where(ok, top, 1.0))), 0.0)


def _transpose(cts, *operands, normalize, eps, reverse, f32_out):
    """Cotangents of the unnormalized kernel: num_i = sum_j s(i, j) c_j, den_i = sum_j s(i, j),
    s(i, j) = a_i . b_j (+ alpha_i beta_j). Those of a, b and c are the kernel again, the
    normalizer's cotangent riding on the rank-1 term; those of alpha and beta (second order
    only) are cumulative sums in jnp."""
    if normalize:
        raise NotImplementedError("jaxnorm: the normalized linear-attention kernel is not linear")
    a, b, c = operands[:3]
    alpha, beta = operands[3:] if len(operands) == 5 else (None, None)
    ct_num, ct_den = cts
    undefined = [ad.is_undefined_primal(x) for x in operands]
    dtype = _aval(a).dtype
    num_zero, den_zero = type(ct_num) is ad.Zero, type(ct_den) is ad.Zero
    if num_zero and den_zero:
        return [_zeros(x) if u else None for x, u in zip(operands, undefined)]
    f32 = jnp.float32
    ct_den = None if den_zero else ct_den
    # float16: the normalized output's numerator cotangent, ct / (den + eps), falls below
    # float16's range as den grows with the position (dv was 79% zeros at 2048 positions):
    # bring its largest |entry| to 1 by a power of two before rounding it, the normalizer's
    # cotangent alike (the kernels are linear in the pair), and undo it, exactly, on their
    # float32 outputs.
    shift = None
    if dtype == jnp.float16 and not num_zero:
        ct_num = ct_num.astype(f32)
        shift = _unit_shift(ct_num)
        ct_num = ct_num * jnp.exp2(-shift)
        ct_den = None if ct_den is None else ct_den * jnp.exp2(-shift)
    ct_num = jnp.zeros(_aval(c).shape, dtype) if num_zero else _as(ct_num, dtype)
    out = [None] * len(operands)

    def kernel(x, y, z, al, be, rev):
        r = _bind(_as(x, dtype), _as(y, dtype), _as(z, dtype), al, be, reverse=rev, f32_out=shift is not None)[0]
        return r if shift is None else (r * jnp.exp2(shift)).astype(dtype)

    rows_len = ct_num.shape[:2]
    ones = None if den_zero else jnp.ones(rows_len, f32)
    if undefined[0]:  # d/da_i = sum_{j<=i} (ct_i . c_j + ct_den_i) b_j
        out[0] = kernel(ct_num, c, b, ct_den, ones, reverse)
    if undefined[1]:  # d/db_j = sum_{i>=j} (c_j . ct_i + ct_den_i) a_i
        al, be = ones, ct_den
        if ct_den is not None and dtype == jnp.float16:
            # The kernel rounds beta to float16 for its running sums (of beta c): bring the
            # largest |ct_den| to 1 by a power of two, undone exactly through alpha.
            t = _unit_shift(ct_den)
            al, be = ones * jnp.exp2(t), ct_den * jnp.exp2(-t)
        out[1] = kernel(c, ct_num, a, al, be, not reverse)
    if undefined[2]:  # d/dc_j = sum_{i>=j} s(i, j) ct_i
        out[2] = kernel(b, a, ct_num, beta, alpha, not reverse)
    if len(operands) == 5 and (undefined[3] or undefined[4]):
        ctn = ct_num.astype(f32)
        ctd = jnp.zeros(rows_len, f32) if ct_den is None else ct_den
        if undefined[3]:  # d/dalpha_i = ct_i . sum_{j<=i} beta_j c_j + ct_den_i sum_{j<=i} beta_j
            w = _cumsum(beta[..., None] * c.astype(f32), reverse)
            out[3] = jnp.sum(ctn * w, -1) + ctd * _cumsum(beta, reverse)
        if undefined[4]:  # d/dbeta_j = c_j . sum_{i>=j} alpha_i ct_i + sum_{i>=j} alpha_i ct_den_i
            w = _cumsum(alpha[..., None] * ctn, not reverse)
            out[4] = jnp.sum(c.astype(f32) * w, -1) + _cumsum(alpha * ctd, not reverse)
    return out


for _p in (linear_attention_p, linear_attention_rank1_p):
    ad.primitive_jvps[_p] = _jvp
    ad.primitive_transposes[_p] = _transpose


def _feature_map(x, feature_map):
    if callable(feature_map):
        y = feature_map(x)
        return y.astype(x.dtype) if hasattr(y, "astype") else jnp.asarray(y, x.dtype)
    if feature_map == "elu+1":
        return (jax.nn.elu(x.astype(jnp.float32)) + 1.0).astype(x.dtype)
    return x


def _mapped(fn, q, k, feature_map):
    """phi(q), phi(k): a callable may change the width (a random-features map, d_k -> m), not the
    leading axes; the kernels and the state take phi's width as d_k."""
    qm, km = _feature_map(q, feature_map), _feature_map(k, feature_map)
    if qm.shape != km.shape or qm.shape[:-1] != q.shape[:-1]:
        raise ValueError(f"{fn}: `feature_map` must map q and k {tuple(q.shape)} to arrays of one shape "
                         f"{tuple(q.shape[:-1])} + (width,), got {tuple(qm.shape)} and {tuple(km.shape)}")
    return qm, km


def _check(fn, q, k, v, feature_map, eps, layout):
    q = _checks.as_array(q, fn, "q")
    k = _checks.as_array(k, fn, "k")
    v = _checks.as_array(v, fn, "v")
    _checks.check_input_dtype(q, fn, "q")
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise TypeError(f"{fn}: `{name}` must have q's dtype {np.dtype(q.dtype)}, got {np.dtype(x.dtype)}")
    if layout not in LAYOUTS:
        raise ValueError(f"{fn}: `layout` must be one of {LAYOUTS}, got {layout!r}")
    if not (callable(feature_map) or feature_map in FEATURE_MAPS):
        raise ValueError(f"{fn}: `feature_map` must be one of {FEATURE_MAPS} or a callable, got {feature_map!r}")
    eps = _checks.static_float(eps, fn, "eps")
    if not eps >= 0:
        raise ValueError(f"{fn}: `eps` must be >= 0, got {eps!r}")
    return q, k, v, eps


def linear_attention(q, k, v, *, causal: bool = True, feature_map: str | Callable = "elu+1",
                     normalize: bool = True, eps: float = 1e-6, layout: str = "BHLD",
                     return_state: bool = False):
    """Linear attention of every position over the positions up to it (``causal``) or all.

    Args:
      q, k: ``[batch, heads, len, d_k]`` (``layout="BHLD"``) or ``[batch, len, heads, d_k]``
        (``"BLHD"``, transposed in jnp first); float32, bfloat16 or float16.
      v: ``[batch, heads, len, d_v]`` (or ``[batch, len, heads, d_v]``), q's dtype.
        d_k and d_v are each 32, 64, 128 or 256.
      feature_map: ``"elu+1"`` (``elu(x) + 1``, computed in float32), ``"identity"`` (q and k
        are already mapped) or a callable applied to q and k with jnp before the kernel (its
        derivative comes from JAX). A callable may change the last axis (random features,
        ``[..., d_k] -> [..., m]``): then m is the d_k that the kernel and the state take.
      normalize: divide by ``phi(q_i) . z_i + eps``; without it the output is the numerator.
      eps: added to the normalizer (float32).
      return_state: also return the state after the last position, ``(S [batch, heads, d_k,
        d_v], z [batch, heads, d_k])`` in float32, for :func:`linear_attention_step`.

    Returns:
      ``out`` in q's layout and dtype (with ``return_state``: ``(out, (S, z))``).
    """
    fn = "linear_attention"
    q, k, v, eps = _check(fn, q, k, v, feature_map, eps, layout)
    causal = _checks.static_bool(causal, fn, "causal")
    normalize = _checks.static_bool(normalize, fn, "normalize")
    return_state = _checks.static_bool(return_state, fn, "return_state")
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"{fn}: q, k and v must be rank 4 ({layout}), got shapes "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    # The shapes as given (before "BLHD" is transposed), for the messages.
    given = {"q": tuple(q.shape), "v": tuple(v.shape)}
    leading = "batch, heads and len" if layout == "BHLD" else "batch, len and heads"
    if k.shape != q.shape:
        raise ValueError(f"{fn}: `k` must have q's shape {tuple(q.shape)}, got {tuple(k.shape)} ({layout})")
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(f"{fn}: `v` must share q's {leading} {tuple(q.shape[:3])}, "
                         f"got shape {tuple(v.shape)} ({layout})")
    if layout == "BLHD":
        q, k, v = (jnp.swapaxes(x, 1, 2) for x in (q, k, v))
    qm, km = _mapped(fn, q, k, feature_map)
    batch, heads, length, d_k = qm.shape
    d_v = v.shape[3]
    for name, d in (("d_k (feature_map's width)" if callable(feature_map) else "d_k", d_k), ("d_v", d_v)):
        if d not in HEAD_DIMS:
            raise ValueError(f"{fn}: {name} must be one of {HEAD_DIMS}, got {d} (shapes q {given['q']}, "
                             f"v {given['v']} ({layout}), phi's width {d_k})")
    if length >= 2**31 - 1:
        raise ValueError(f"{fn}: len must be below 2^31 - 1, got {length}")
    if causal:
        if batch * heads * length == 0:
            out = jnp.zeros((batch, heads, length, d_v), q.dtype)
        else:
            per_head = lambda a: merge_axes(a, (2, 1, 1))  # noqa: E731
            out, _ = _bind(per_head(qm), per_head(km), per_head(v), normalize=normalize, eps=eps)
            out = out.reshape(batch, heads, length, d_v)
    else:
        out = _non_causal(qm, km, v, normalize, eps)
    if layout == "BLHD":
        out = jnp.swapaxes(out, 1, 2)
    if not return_state:
        return out
    kf, vf = (gathered(a.astype(jnp.float32), (2, 3)) for a in (km, v))
    state = (jnp.einsum("bhlk,bhlv->bhkv", kf, vf, precision="highest"), kf.sum(axis=2))
    return out, state


def _non_causal(qm, km, v, normalize, eps):
    f32 = jnp.float32
    # Whole (len, d) planes on each device: the contractions run over len and d.
    qm, km, v = (gathered(a, (2, 3)) for a in (qm, km, v))
    # Full float32 products (no TF32 on GPUs), as the causal kernels' float32 path.
    s = jnp.einsum("bhlk,bhlv->bhkv", km, v, preferred_element_type=f32, precision="highest")
    num = jnp.einsum("bhlk,bhkv->bhlv", qm.astype(f32), s, precision="highest")
    if normalize:
        z = km.astype(f32).sum(axis=2)
        num = num / (jnp.einsum("bhlk,bhk->bhl", qm.astype(f32), z, precision="highest")[..., None] + eps)
    return num.astype(qm.dtype)


def linear_attention_step(q, k, v, state, *, feature_map: str | Callable = "elu+1", normalize: bool = True,
                          eps: float = 1e-6):
    """One recurrent step: appends ``(k, v)`` to ``state`` and attends ``q`` over it.

    Args:
      q, k: ``[batch, heads, d_k]``; v: ``[batch, heads, d_v]``; one dtype.
      state: ``(S [batch, heads, d_k, d_v], z [batch, heads, d_k])`` float32 (d_k: feature_map's
        width), as returned by
        ``linear_attention(..., return_state=True)`` or a previous step (zeros to start); a
        state of another float dtype is taken in float32. The step is jnp, not a kernel: any
        d_k and d_v.

    Returns:
      ``(out [batch, heads, d_v], new_state)``: the same as the causal ``linear_attention`` at
      the next position. A step reads the state once; it is written in jnp, which XLA fuses
      into one pass.
    """
    fn = "linear_attention_step"
    q, k, v, eps = _check(fn, q, k, v, feature_map, eps, "BHLD")
    normalize = _checks.static_bool(normalize, fn, "normalize")
    if q.ndim != 3 or k.shape != q.shape or v.ndim != 3 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"{fn}: q, k must be [batch, heads, d_k] and v [batch, heads, d_v], got shapes "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    try:
        s, z = state
    except (TypeError, ValueError) as e:
        raise TypeError(f"{fn}: `state` must be a pair (S, z), got {type(state).__name__}") from e
    f32 = jnp.float32
    # Whole d_k and d_v on each device: the step's outer product and contractions run over them.
    qm, km = (gathered(x.astype(f32), (2,)) for x in _mapped(fn, q, k, feature_map))
    v = gathered(v, (2,))
    batch, heads, d_k = qm.shape
    d_v = v.shape[2]
    want = ((batch, heads, d_k, d_v), (batch, heads, d_k))
    if tuple(jnp.shape(s)) != want[0] or tuple(jnp.shape(z)) != want[1]:
        raise ValueError(f"{fn}: `state` must be (S {want[0]}, z {want[1]}), got "
                         f"({tuple(jnp.shape(s))}, {tuple(jnp.shape(z))})")
    s = gathered(s.astype(f32), (2, 3)) + km[..., :, None] * v.astype(f32)[..., None, :]
    z = gathered(z.astype(f32), (2,)) + km
    num = jnp.einsum("bhk,bhkv->bhv", qm, s, precision="highest")
    if normalize:
        num = num / (jnp.einsum("bhk,bhk->bh", qm, z, precision="highest")[..., None] + eps)
    return num.astype(q.dtype), (s, z)
