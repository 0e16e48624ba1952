"""A decoding loop that samples with jaxnorm: a toy language model (embedding, two MLP blocks with
jaxnorm RMSNorm, a tied output projection with an output bias) generates tokens in one
`lax.while_loop`, once with `jaxnorm.sample` and once with the jax.numpy sampler users write today
(`lax.top_k` + sort-based top-p + `jax.random.categorical`). Prints tokens/s of both.

The loop carries which sequences have ended: a sequence that emitted END_ID keeps emitting it
(FasterTransformer's logits update: the output bias added, finished rows forced to the end
token). jaxnorm.sample does both inside the sampler's read of the logits (`bias=`, `finished=`,
`end_id=`); the jnp form adds the bias and masks the tokens as separate steps.

    python examples/decode_sampling.py [--batch 8] [--vocab 128256] [--steps 64]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

import jaxnorm


END_ID = 1  # the end-of-sequence token


def init(key, vocab, d, *, end_bias=4.0):
    k1, k2, k3, k4 = jax.random.split(key, 4)
    # A small output bias, END_ID's raised by `end_bias` so that sequences end now and then.
    bias = (0.1 * jax.random.normal(k4, (vocab,), jnp.float32)).at[END_ID].add(end_bias)
    return {"emb": jax.random.normal(k1, (vocab, d), jnp.float32) * d**-0.5,
            "w1": jax.random.normal(k2, (2, d, 4 * d), jnp.float32) * d**-0.5,
            "w2": jax.random.normal(k3, (2, 4 * d, d), jnp.float32) * (4 * d) ** -0.5,
            "scale": jnp.ones((2, d), jnp.float32),
            "out_bias": bias}


def logits_of(params, tokens):
    h = params["emb"][tokens]
    for i in range(2):
        h = h + jax.nn.gelu(jaxnorm.rms_norm(h, params["scale"][i]) @ params["w1"][i]) @ params["w2"][i]
    return (h @ params["emb"].T) * 4.0  # a few units of spread, like trained logits (the bias not added)


def jnp_sample(key, logits, *, top_k, top_p):
    v, i = jax.lax.top_k(logits, top_k)
    probs = jax.nn.softmax(v, axis=-1)
    v = jnp.where(jnp.cumsum(probs, axis=-1) - probs < top_p, v, -jnp.inf)
    return jnp.take_along_axis(i, jax.random.categorical(key, v)[..., None], axis=-1)[..., 0]


def jaxnorm_update_sample(key, logits, bias, finished, *, top_k, top_p):
    return jaxnorm.sample(key, logits, top_k=top_k, top_p=top_p, bias=bias, finished=finished, end_id=END_ID)


def jnp_update_sample(key, logits, bias, finished, *, top_k, top_p):
    return jnp.where(finished, END_ID, jnp_sample(key, logits + bias, top_k=top_k, top_p=top_p))


def generate(params, key, first, steps, sampler, *, top_k=50, top_p=0.9):
    """`steps` tokens a sequence; `sampler(key, logits, bias, finished, top_k=, top_p=)`. Every
    step runs even once all sequences have ended, so that both samplers time the same work."""
    def body(state):
        t, tok, finished, out, key = state
        key, sub = jax.random.split(key)
        nxt = sampler(sub, logits_of(params, tok), params["out_bias"], finished, top_k=top_k, top_p=top_p)
        nxt = nxt.astype(jnp.int32)
        return t + 1, nxt, finished | (nxt == END_ID), out.at[:, t].set(nxt), key

    out = jnp.zeros((first.shape[0], steps), jnp.int32)
    finished = jnp.zeros(first.shape, bool)
    return jax.lax.while_loop(lambda s: s[0] < steps, body, (0, first, finished, out, key))[3]


SAMPLERS = {"jaxnorm.sample": jaxnorm_update_sample, "jnp (top_k + sort + categorical)": jnp_update_sample}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--steps", type=int, default=64)
    args = ap.parse_args(argv)
    params = init(jax.random.key(0), args.vocab, args.d)
    first = jnp.arange(args.batch, dtype=jnp.int32)
    rates = {}
    for name, sampler in SAMPLERS.items():
        f = jax.jit(lambda p, k, t, s=sampler: generate(p, k, t, args.steps, s))
        jax.block_until_ready(f(params, jax.random.key(1), first))
        t0 = time.perf_counter()
        out = jax.block_until_ready(f(params, jax.random.key(2), first))
        dt = time.perf_counter() - t0
        rates[name] = args.batch * args.steps / dt
        print(f"{name:36s} {rates[name]:10.0f} tokens/s  (first row: {list(map(int, out[0, :8]))} ...)")
    return rates


if __name__ == "__main__":
    main()
