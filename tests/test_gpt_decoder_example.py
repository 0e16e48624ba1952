"""examples/gpt_decoder.py: the jaxnorm decoding loop (embed_with_position, layer_norm,
decode_attention appending in place, sample) gives the same greedy tokens as the jnp form
(jax.nn.dot_product_attention over dynamic_update_slice'd caches, argmax), and the jitted loop
updates its donated caches without copying them."""

import os
import sys

import numpy as np
import pytest

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import gpt_decoder as ex  # noqa: E402


@pytest.mark.parametrize("heads,kv_heads", [(4, 1), (4, 2), (4, 4)])
def test_greedy_tokens_match_jnp(heads, kv_heads):
    params, h = ex.init(jax.random.key(heads + kv_heads), vocab=512, layers=2, d=256, heads=heads,
                        kv_heads=kv_heads)
    first = jnp.array([3, 100, 511], jnp.int32)
    out = {}
    for form in ("jaxnorm", "jnp"):
        caches = ex.empty_caches(params, h, 3, 40, blhd=form == "jnp")
        gen = jax.jit(lambda p, c, form=form: ex.generate(p, h, jax.random.key(0), first, c, 12, form=form, start=5))
        out[form] = np.asarray(gen(params, caches)[0])
    assert out["jaxnorm"].shape == (3, 12)
    assert len(np.unique(out["jaxnorm"])) > 3  # not a degenerate constant stream
    np.testing.assert_array_equal(out["jaxnorm"], out["jnp"])


def test_sampling_loop_runs_and_caches_are_not_copied():
    params, h = ex.init(jax.random.key(1), vocab=300, layers=2, d=128, heads=2, kv_heads=1)
    first = jnp.zeros((2,), jnp.int32)
    caches = ex.empty_caches(params, h, 2, 24, blhd=False)
    gen = jax.jit(lambda p, c: ex.generate(p, h, jax.random.key(2), first, c, 8, form="jaxnorm", temperature=0.8),
                  donate_argnums=(1,))
    text = gen.lower(params, caches).compile().as_text()
    cache_type = "f32[2,1,24,64]"
    assert not [line for line in text.splitlines() if " copy(" in line and cache_type in line]
    toks = np.asarray(gen(params, caches)[0])
    assert toks.shape == (2, 8) and ((toks >= 0) & (toks < 300)).all()


def test_main_prints_rates():
    rates = ex.main(["--layers", "1", "--d", "128", "--heads", "2", "--kv-heads", "1", "--vocab", "256",
                     "--batch", "2", "--context", "32", "--steps", "4"])
    assert all(r > 0 for v in rates.values() for r in v.values())


def test_residual_adds_are_fused_into_the_norms():
    """Every residual add of the jaxnorm step goes through a residual-add norm kernel: two a layer
    (before the MLP's norm and the next layer's or the final norm), so the step holds 2 x layers
    of them and one plain layer_norm (the first)."""
    params, h = ex.init(jax.random.key(3), vocab=64, layers=3, d=128, heads=2, kv_heads=1)
    caches = ex.empty_caches(params, h, 2, 16, blhd=False)
    ids, pos = jnp.array([1, 2], jnp.int32), jnp.array([4, 4], jnp.int32)
    text = jax.jit(lambda p, c: ex.step_jaxnorm(p, h, ids, pos, c)).lower(params, caches).as_text()
    assert text.count("@jaxnorm_add_norm_fwd(") == 6
    assert text.count("@jaxnorm_norm_fwd(") == 1
