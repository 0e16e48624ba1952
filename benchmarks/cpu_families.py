"""The operator families' cases for benchmarks/bench_cpu.py: per op, the inputs at one shape and
the two functions timed against each other, jaxnorm's and the plain jax.numpy form a user would
write (jaxnorm.reference, lax.top_k, the einsum decode step), in the row ops' step form
f(x, *params) so that bench_cpu.py times them with the same pairing and anchor.

Each case builds N distinct primary inputs x (the tensor the op streams over: logits, q, ids,
the padded batch) and shares the other operands (keys, caches, tables, offsets) as params.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

import jaxnorm
import jaxnorm.reference as ref
from jaxnorm import _timing as T


@dataclass
class Case:
    xs: tuple
    dys: tuple | None
    params: tuple
    jaxnorm: Callable
    xla: Callable
    # check(jaxnorm outputs, XLA outputs) -> bool, for the first input; None: T.compare
    check: Callable | None = None


# op -> (default shapes, directions it has, what the shape string means)
SPECS = {
    "sample": (["8x32000", "64x32000"], ["fwd"], "rows x vocab"),
    "filter_logits": (["8x32000", "64x32000"], ["fwd"], "rows x vocab"),
    "top_k": (["8x32000", "64x32000"], ["fwd"], "rows x vocab, k = 50"),
    "linear_attention": (["1x4x1024x64"], ["fwd", "fwd+bwd"], "B x H x L x D, causal elu+1"),
    "decode_attention": (["4x8x2x4096x64", "4x8x2x4096x128"], ["fwd"], "B x Hq x Hkv x L x D"),
    "embed_with_position": (["64x1024x32000x768"], ["fwd", "table_grad"], "B x L ids, V x D table"),
    "remove_padding": (["64x512x768"], ["fwd"], "B x max_len x width"),
    "rebuild_padding": (["64x512x768"], ["fwd"], "B x max_len x width"),
}
# The sampling filters timed (each a separate op name: sample/top_k=50, ...).
FILTERS = {"top_k=50": dict(top_k=50), "top_p=0.9": dict(top_p=0.9), "none": dict()}
TOP_K = 50


def n_inputs(elements: int) -> int:
    return max(1, min(16, (1 << 22) // max(elements, 1)))


def _normal(rng, shape, dtype, n):
    return tuple(jnp.asarray(rng.standard_normal(shape, np.float32).astype(dtype)) for _ in range(n))


def _in_mask(filters):
    """Sampled tokens cannot match another sampler's draws; they must lie in the kept set."""
    def check(got, want, x):
        del want
        mask = ref.sampling_mask(x, **filters)
        tok = np.asarray(got)
        return bool(np.all(np.asarray(mask)[np.arange(tok.shape[0]), tok]))
    return check


def make_case(op: str, shape: tuple[int, ...], dtype_name: str, filters: str | None = None) -> Case:
    dtype = T.DTYPES[dtype_name]
    rng = np.random.default_rng(0)
    if op in ("sample", "filter_logits"):
        rows, vocab = shape
        n = n_inputs(rows * vocab)
        # Logits of a trained model's scale: most mass on a few tokens, as real decoding sees.
        xs = tuple(x * 3 for x in _normal(rng, shape, dtype, n))
        f = FILTERS[filters]
        if op == "sample":
            key = jax.random.key(1)
            return Case(xs, None, (key,),
                        lambda x, k: jaxnorm.sample(k, x, **f), lambda x, k: ref.sample(k, x, **f),
                        check=lambda got, want: _in_mask(f)(got, want, xs[0]))
        return Case(xs, None, (), lambda x: jaxnorm.filter_logits(x, **f), lambda x: ref.filter_logits(x, **f))
    if op == "top_k":
        rows, vocab = shape
        xs = _normal(rng, shape, dtype, n_inputs(rows * vocab))
        return Case(xs, None, (), lambda x: jaxnorm.top_k(x, TOP_K), lambda x: lax.top_k(x, TOP_K),
                    check=lambda got, want: all(np.array_equal(np.asarray(a), np.asarray(b))
                                                for a, b in zip(got, want)))
    if op == "linear_attention":
        n = n_inputs(math.prod(shape))
        qs = _normal(rng, shape, dtype, n)
        k, v = (x[0] * 0.5 for x in (_normal(rng, shape, dtype, 1), _normal(rng, shape, dtype, 1)))
        dys = _normal(rng, shape, dtype, n)
        return Case(tuple(q * 0.5 for q in qs), dys, (k, v),
                    lambda q, k, v: jaxnorm.linear_attention(q, k, v),
                    lambda q, k, v: ref.linear_attention(q, k, v))
    if op == "decode_attention":
        b, hq, hkv, length, d = shape
        kc, vc = (x[0] for x in (_normal(rng, (b, hkv, length, d), dtype, 1),
                                 _normal(rng, (b, hkv, length, d), dtype, 1)))
        # Caches partly full, as in a batch of sequences at different steps.
        lengths = jnp.asarray(rng.integers(length // 2, length + 1, b), jnp.int32)
        qs = _normal(rng, (b, hq, d), dtype, n_inputs(b * hkv * length * d))
        return Case(qs, None, (kc, vc, lengths),
                    lambda q, k, v, n: jaxnorm.decode_attention(q, k, v, n),
                    lambda q, k, v, n: ref.decode_attention(q, k, v, n))
    if op == "embed_with_position":
        b, length, vocab, d = shape
        table = _normal(rng, (vocab, d), dtype, 1)[0]
        n = n_inputs(b * length * d)
        ids = tuple(jnp.asarray(rng.integers(0, vocab, (b, length)), jnp.int32) for _ in range(n))
        pos = jnp.arange(length, dtype=jnp.int32)
        dys = _normal(rng, (b, length, d), dtype, n)
        return Case(ids, dys, (table,),
                    lambda i, t: jaxnorm.embed_with_position(i, t, position=pos),
                    lambda i, t: ref.embed_with_position(i, t, position=pos))
    if op in ("remove_padding", "rebuild_padding"):
        b, length, width = shape
        lengths = jnp.asarray(rng.integers(1, length + 1, b), jnp.int32)
        offsets = jaxnorm.padding_offsets(lengths, length, b * length)
        ins = (b, length, width) if op == "remove_padding" else (b * length, width)
        xs = _normal(rng, ins, dtype, n_inputs(math.prod(ins)))
        fn = getattr(jaxnorm, op)
        ref_fn = getattr(ref, op)
        return Case(xs, None, (offsets,), lambda x, o: fn(x, o), lambda x, o: ref_fn(x, o))
    raise ValueError(f"unknown family op {op!r}")


def table_grad_step(fn: Callable) -> Callable:
    """The table gradient alone (no forward output): f(dout, ids, table) -> d table."""
    def grad(dout, ids, table):
        _, pullback = jax.vjp(lambda t: fn(ids, t), table)
        return pullback(dout)[0]
    return grad
