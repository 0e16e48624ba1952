"""A GPT-style decoder generating tokens with jaxnorm's decoding-step ops, against the same model
written the way JAX users write it today.

Both forms run one `lax.while_loop` over decoding steps with the KV caches in the loop carry
(updated in place: the jaxnorm form appends through `decode_attention`'s aliased caches, the jnp
form through `lax.dynamic_update_slice`), random weights, pre-LN blocks, grouped-query attention:

- jaxnorm: `embed_with_position` (lookup x sqrt(d) + sine position), `layer_norm` with each
  residual add fused into it (`residual=`), `decode_attention` (appending the new key/value in
  place), `sample`.
- jnp: `table[ids] * sqrt(d) + jaxnorm.reference.sine_position_encoding`, `jax.nn` ops,
  `jax.nn.dot_product_attention` over the whole cache with `key_value_seq_lengths`, `argmax` /
  `jax.random.categorical`.

The QKV projection is one matmul with the fused `[d, (Hq + 2 Hkv) * D]` weight in both (what
FasterTransformer's batched GEMM achieves; XLA maps it to one GEMM). Greedy decoding gives the
same tokens in both forms (tests/test_gpt_decoder_example.py, float32 on CPU).

    python examples/gpt_decoder.py [--layers 12 --d 768 --heads 12 --kv-heads 4 --batch 8
                                    --context 4096 --steps 64 --dtype bfloat16]

Prints tokens/s of both (wall clock of the jitted generation, median of 3, after a warm-up).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp

import jaxnorm
from jaxnorm import reference


def init(key, *, vocab, layers, d, heads, kv_heads, dtype=jnp.float32):
    hd = d // heads
    ks = iter(jax.random.split(key, 4 * layers + 2))

    def w(shape, fan_in):
        return (jax.random.normal(next(ks), shape, jnp.float32) * fan_in**-0.5).astype(dtype)

    blocks = [dict(ln1=jnp.ones(d, jnp.float32), ln2=jnp.ones(d, jnp.float32),
                   qkv=w((d, (heads + 2 * kv_heads) * hd), d), out=w((heads * hd, d), heads * hd),
                   up=w((d, 4 * d), d), down=w((4 * d, d), 4 * d)) for _ in range(layers)]
    params = dict(table=w((vocab, d), 1.0) * 0.05, blocks=blocks, ln_f=jnp.ones(d, jnp.float32),
                  unembed=w((d, vocab), d))
    return params, Heads(heads, kv_heads)


class Heads(NamedTuple):
    q: int
    kv: int


def _split_qkv(x, heads, kv_heads):
    b = x.shape[0]
    hd = x.shape[-1] // (heads + 2 * kv_heads)
    q, k, v = jnp.split(x, [heads * hd, (heads + kv_heads) * hd], axis=-1)
    return q.reshape(b, heads, hd), k.reshape(b, kv_heads, hd), v.reshape(b, kv_heads, hd)


def _mlp(blk, x, norm):
    return jax.nn.gelu(norm(x, blk["ln2"]) @ blk["up"]) @ blk["down"]


def step_jaxnorm(params, heads, ids, pos, caches):
    """One decoding step: tokens `ids` [B] at position `pos` [B] -> logits [B, V], new caches.

    Each residual add is fused into the norm that follows it (`layer_norm(..., residual=x)`
    returns the norm of the sum and the sum): a sublayer's output is added to the residual
    stream `x` by the next norm's kernel, not by a kernel of its own."""
    heads, kv_heads = heads
    x = jaxnorm.embed_with_position(ids, params["table"], position=pos)
    pending = None  # the last sublayer's output, not yet added to x
    new = []
    for blk, (kc, vc) in zip(params["blocks"], caches):
        if pending is None:
            y = jaxnorm.layer_norm(x, blk["ln1"])
        else:
            y, x = jaxnorm.layer_norm(pending, blk["ln1"], residual=x)
        q, k, v = _split_qkv(y @ blk["qkv"], heads, kv_heads)
        o, kc, vc = jaxnorm.decode_attention(q, kc, vc, pos, k_new=k, v_new=v)
        y, x = jaxnorm.layer_norm(o.reshape(x.shape[0], -1) @ blk["out"], blk["ln2"], residual=x)
        pending = jax.nn.gelu(y @ blk["up"]) @ blk["down"]
        new.append((kc, vc))
    y = jaxnorm.layer_norm(x, params["ln_f"]) if pending is None else \
        jaxnorm.layer_norm(pending, params["ln_f"], residual=x)[0]
    return y @ params["unembed"], new


def _jnp_norm(x, scale):
    return reference.layer_norm(x, scale)


def step_jnp(params, heads, ids, pos, caches):
    """The same step in jnp; caches [B, L, Hkv, D] (jax.nn.dot_product_attention's layout). Every
    sequence is at the same position (pos[0]), as in `generate`."""
    heads, kv_heads = heads
    table = params["table"]
    d = table.shape[1]
    x = (table[ids].astype(jnp.float32) * d**0.5 + reference.sine_position_encoding(pos, d)).astype(table.dtype)
    new = []
    for blk, (kc, vc) in zip(params["blocks"], caches):
        q, k, v = _split_qkv(_jnp_norm(x, blk["ln1"]) @ blk["qkv"], heads, kv_heads)
        at = (jnp.int32(0), pos[0], jnp.int32(0), jnp.int32(0))
        kc = jax.lax.dynamic_update_slice(kc, k[:, None], at)
        vc = jax.lax.dynamic_update_slice(vc, v[:, None], at)
        o = jax.nn.dot_product_attention(q[:, None], kc, vc, key_value_seq_lengths=pos + 1)[:, 0]
        x = x + o.reshape(x.shape[0], -1) @ blk["out"]
        x = x + _mlp(blk, x, _jnp_norm)
        new.append((kc, vc))
    return _jnp_norm(x, params["ln_f"]) @ params["unembed"], new


def empty_caches(params, heads, batch, context, *, blhd):
    hd = params["table"].shape[1] // heads.q
    shape = (batch, context, heads.kv, hd) if blhd else (batch, heads.kv, context, hd)
    dt = params["table"].dtype
    return [(jnp.zeros(shape, dt), jnp.zeros(shape, dt)) for _ in params["blocks"]]


def generate(params, heads, key, first, caches, steps, *, form, temperature=0.0, start=0):
    """`steps` tokens after `first` [B], every sequence starting at position `start` of caches
    sized for start + steps. Returns (int32 tokens [B, steps], the caches): returning the caches
    lets a caller that donates them have them updated in place, never copied."""
    step = step_jaxnorm if form == "jaxnorm" else step_jnp
    batch = first.shape[0]

    def sample(key, logits):
        if form == "jaxnorm":
            return jaxnorm.sample(key, logits, temperature=temperature, top_k=50)
        if temperature == 0:
            return jnp.argmax(logits, axis=-1).astype(jnp.int32)
        vals, idx = jax.lax.top_k(logits.astype(jnp.float32) / temperature, 50)
        return jnp.take_along_axis(idx, jax.random.categorical(key, vals)[:, None], axis=-1)[:, 0]

    def body(carry):
        i, ids, out, caches, key = carry
        key, sub = jax.random.split(key)
        pos = jnp.full((batch,), start, jnp.int32) + i
        logits, caches = step(params, heads, ids, pos, caches)
        ids = sample(sub, logits).astype(jnp.int32)
        return i + 1, ids, out.at[:, i].set(ids), caches, key

    init = (jnp.int32(0), first.astype(jnp.int32), jnp.zeros((batch, steps), jnp.int32), caches, key)
    _, _, out, caches, _ = jax.lax.while_loop(lambda c: c[0] < steps, body, init)
    return out, caches


def tokens_per_s(params, heads, form, batch, context, steps):
    """Wall clock of generating `steps` tokens per sequence from position context - steps - 1 of
    caches of `context` positions (the attention reads ~context rows every step)."""
    start = context - steps - 1
    gen = jax.jit(lambda p, k, f, c: generate(p, heads, k, f, c, steps, form=form, start=start), donate_argnums=(3,))
    first = jnp.zeros((batch,), jnp.int32)
    times = []
    for r in range(4):
        caches = empty_caches(params, heads, batch, context, blhd=form == "jnp")
        caches = jax.block_until_ready(caches)
        t0 = time.perf_counter()
        jax.block_until_ready(gen(params, jax.random.key(r), first, caches))
        if r:  # the first call compiles
            times.append(time.perf_counter() - t0)
    return batch * steps / statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--context", type=int, nargs="+", default=[256])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args(argv)
    dtype = jnp.dtype(args.dtype)
    params, heads = init(jax.random.key(0), vocab=args.vocab, layers=args.layers, d=args.d, heads=args.heads,
                  kv_heads=args.kv_heads, dtype=dtype)
    rates = {}
    print(f"{jax.devices()[0].device_kind}: {args.layers} layers, d={args.d}, {args.heads}:{args.kv_heads} heads, "
          f"vocab {args.vocab}, {dtype}, {args.steps} steps")
    for batch in args.batch:
        for context in args.context:
            r = {form: tokens_per_s(params, heads, form, batch, context, args.steps) for form in ("jaxnorm", "jnp")}
            rates[(batch, context)] = r
            print(f"batch {batch:3d} context {context:6d}: jaxnorm {r['jaxnorm']:9.1f} tokens/s, jnp "
                  f"{r['jnp']:9.1f} tokens/s ({r['jaxnorm'] / r['jnp']:.2f}x)", flush=True)
    return rates


if __name__ == "__main__":
    main()
