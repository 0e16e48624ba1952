"""A BERT-base encoder layer written twice: padded and packed.

Padded: every position of ``[batch, max_len, hidden]`` goes through the projections, the MLP and
the norms; attention masks the padding by the sequence lengths. Packed (FasterTransformer's
"effective transformer"): the valid tokens are packed into ``[capacity, hidden]`` rows once, the
position-wise work runs on those rows only, and only attention sees the padded layout:
``add_qkv_bias_rebuild_padding`` adds the QKV bias while scattering the packed projections into
``[batch, max_len, heads, head_dim]`` (zeros at padding), and ``transpose_remove_padding`` packs
the attention output again. Attention is ``jax.nn.dot_product_attention`` in both (cuDNN's on a GPU).

    python examples/packed_encoder.py [--batch 32 --max-len 512 --padding 0.5]

checks that both give the same outputs at the valid positions and prints their wall-clock times
(``benchmarks/bench_padding.py`` measures device time).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

import jax
import jax.numpy as jnp

import jaxnorm

BERT_BASE = dict(hidden=768, heads=12, mlp=3072)


def init_params(key, *, hidden, heads, mlp, dtype=jnp.bfloat16):
    ks = jax.random.split(key, 8)

    def dense(k, n_in, n_out):
        return (jax.random.normal(k, (n_in, n_out), jnp.float32) / math.sqrt(n_in)).astype(dtype)

    def vec(k, n, scale=0.02, offset=0.0):
        return offset + scale * jax.random.normal(k, (n,), jnp.float32)

    return dict(
        wqkv=dense(ks[0], hidden, 3 * hidden), bqkv=vec(ks[1], 3 * hidden),
        wo=dense(ks[2], hidden, hidden), bo=vec(ks[3], hidden),
        w1=dense(ks[4], hidden, mlp), b1=vec(ks[5], mlp),
        w2=dense(ks[6], mlp, hidden), b2=vec(ks[7], hidden),
        ln1_scale=jnp.ones((hidden,)), ln1_bias=jnp.zeros((hidden,)),
        ln2_scale=jnp.ones((hidden,)), ln2_bias=jnp.zeros((hidden,)),
    )


def _attention(q, k, v, lengths):
    """[batch, max_len, heads, head_dim] -> same; keys past each length masked. On a GPU, 16-bit
    inputs take cuDNN's flash attention (JAX's default is XLA's, which writes the whole score
    matrix); elsewhere XLA's."""
    impl = "cudnn" if jax.default_backend() == "gpu" and q.dtype in (jnp.bfloat16, jnp.float16) else "xla"
    return jax.nn.dot_product_attention(q, k, v, query_seq_lengths=lengths, key_value_seq_lengths=lengths,
                                        implementation=impl)


def _after_attention(p, rows, attn):
    """Output projection, residual, norm, MLP, residual, norm: position-wise on [n, hidden] rows."""
    dtype = rows.dtype
    h = jaxnorm.layer_norm((rows + (attn @ p["wo"] + p["bo"])).astype(dtype), p["ln1_scale"], p["ln1_bias"])
    m = (jax.nn.gelu((h @ p["w1"] + p["b1"]).astype(dtype)) @ p["w2"] + p["b2"]).astype(dtype)
    return jaxnorm.layer_norm(h + m, p["ln2_scale"], p["ln2_bias"])


def layer_padded(p, x, lengths, *, heads):
    """x [batch, max_len, hidden] -> same; every position computed."""
    batch, max_len, hidden = x.shape
    rows = x.reshape(batch * max_len, hidden)
    qkv = (rows @ p["wqkv"] + p["bqkv"]).astype(x.dtype)
    q, k, v = (t.reshape(batch, max_len, heads, hidden // heads) for t in jnp.split(qkv, 3, axis=-1))
    attn = _attention(q, k, v, lengths).reshape(batch * max_len, hidden)
    return _after_attention(p, rows, attn).reshape(batch, max_len, hidden)


def layer_packed(p, packed, offsets, *, heads):
    """packed [capacity, hidden] -> same: one layer of a packed stack."""
    q, k, v = jaxnorm.add_qkv_bias_rebuild_padding(packed @ p["wqkv"], p["bqkv"], offsets, heads, layout="BLHD")
    attn = jaxnorm.transpose_remove_padding(_attention(q, k, v, offsets.lengths), offsets, layout="BLHD")
    return _after_attention(p, packed, attn)


def encoder_packed(p, x, lengths, *, heads, capacity):
    """x [batch, max_len, hidden] -> same, through the packed layer: the padding is removed on the
    way in and rebuilt (as zeros) on the way out. A stack of layers removes and rebuilds once."""
    offsets = jaxnorm.padding_offsets(lengths, x.shape[1], capacity)
    return jaxnorm.rebuild_padding(layer_packed(p, jaxnorm.remove_padding(x, offsets), offsets, heads=heads), offsets)


def lengths_for(rng, batch, max_len, padding):
    """Lengths whose mean padding fraction is ``padding`` (uniform within +-50% of the mean length)."""
    mean = (1 - padding) * max_len
    lo, hi = max(1, round(mean * 0.5)), min(max_len, round(mean * 1.5))
    lengths = rng.integers(lo, hi + 1, size=batch)
    deficit = round(mean * batch) - int(lengths.sum())  # hit the mean exactly, one token at a time
    i = 0
    while deficit:
        step = 1 if deficit > 0 else -1
        if 1 <= lengths[i % batch] + step <= max_len:
            lengths[i % batch] += step
            deficit -= step
        i += 1
    return jnp.asarray(lengths, jnp.int32)


def bucket(tokens: int, limit: int, step: int = 512) -> int:
    """The capacity a serving loop would compile for: the token count rounded up to a bucket of
    ``step`` rows, at most ``limit`` (batch * max_len, where packing saves nothing)."""
    return min(max(step, -(-tokens // step) * step), max(limit, tokens))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--padding", type=float, default=0.5)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args(argv)
    dtype = jnp.dtype(args.dtype)
    rng = np.random.default_rng(0)
    p = init_params(jax.random.key(0), dtype=dtype, **BERT_BASE)
    lengths = lengths_for(rng, args.batch, args.max_len, args.padding)
    capacity = bucket(int(lengths.sum()), args.batch * args.max_len)
    x = jnp.asarray(rng.normal(size=(args.batch, args.max_len, BERT_BASE["hidden"])), dtype)
    padded = jax.jit(lambda p, x, l: layer_padded(p, x, l, heads=BERT_BASE["heads"]))
    packed = jax.jit(lambda p, x, l: encoder_packed(p, x, l, heads=BERT_BASE["heads"], capacity=capacity))
    valid = np.arange(args.max_len)[None, :] < np.asarray(lengths)[:, None]
    a, b = np.asarray(padded(p, x, lengths), np.float32), np.asarray(packed(p, x, lengths), np.float32)
    err = np.abs(a - b)[valid].max()
    print(f"batch {args.batch} x max_len {args.max_len}, {int(lengths.sum())} tokens "
          f"({100 * (1 - valid.mean()):.0f}% padding), capacity {capacity}; max |padded - packed| at valid "
          f"positions {err:.3g}; padding positions of the packed output all zero: {bool(np.all(b[~valid] == 0))}")
    for name, f in (("padded", padded), ("packed", packed)):
        jax.block_until_ready(f(p, x, lengths))
        t = []
        for _ in range(10):
            t0 = time.perf_counter()
            jax.block_until_ready(f(p, x, lengths))
            t.append(time.perf_counter() - t0)
        print(f"{name}: {1e3 * float(np.median(t)):.2f} ms per layer (wall clock, median of 10)")


if __name__ == "__main__":
    main()
