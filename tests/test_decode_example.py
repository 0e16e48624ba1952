"""examples/decode_sampling.py runs, and its jaxnorm loop draws tokens in range."""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import decode_sampling as ex  # noqa: E402

import jaxnorm  # noqa: E402


def test_decode_loop_small():
    params = ex.init(jax.random.key(0), 300, 32)
    first = jnp.arange(3, dtype=jnp.int32)
    out = jax.jit(lambda p, k: ex.generate(p, k, first, 5, jaxnorm.sample))(params, jax.random.key(1))
    assert out.shape == (3, 5) and out.dtype == jnp.int32
    assert np.all((np.asarray(out) >= 0) & (np.asarray(out) < 300))
    greedy = lambda k, x, top_k, top_p: jaxnorm.sample(k, x, temperature=0.0)  # noqa: E731
    argmax = lambda k, x, top_k, top_p: jnp.argmax(x, axis=-1)  # noqa: E731
    a = ex.generate(params, jax.random.key(1), first, 5, greedy)
    b = ex.generate(params, jax.random.key(1), first, 5, argmax)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_main_prints_rates():
    rates = ex.main(["--batch", "2", "--vocab", "500", "--d", "16", "--steps", "3"])
    assert set(rates) == set(ex.SAMPLERS) and all(r > 0 for r in rates.values())
