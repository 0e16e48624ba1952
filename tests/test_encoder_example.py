"""The packed encoder example (examples/packed_encoder.py): the packed layer gives the padded
layer's outputs at every valid position, zeros at padding, at 0-75% padding; and a two-layer packed
stack (remove once, rebuild once) equals two padded layers."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import jaxnorm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import packed_encoder as enc  # noqa: E402

SMALL = dict(hidden=48, heads=4, mlp=96)
BATCH, MAX_LEN = 6, 24


def _setup(padding, seed):
    rng = np.random.default_rng(seed)
    p = enc.init_params(jax.random.key(seed % 2**31), dtype=jnp.float32, **SMALL)
    lengths = enc.lengths_for(rng, BATCH, MAX_LEN, padding)
    x = jnp.asarray(rng.normal(size=(BATCH, MAX_LEN, SMALL["hidden"])), jnp.float32)
    valid = np.arange(MAX_LEN)[None, :] < np.asarray(lengths)[:, None]
    return p, lengths, x, valid


# float32 GEMMs in full precision: on a GPU the default (TF32) rounds the padded and the packed
# GEMMs, of different shapes, differently.
pytestmark = pytest.mark.usefixtures("highest_precision")


@pytest.fixture
def highest_precision():
    with jax.default_matmul_precision("highest"):
        yield


@pytest.mark.parametrize("padding", [0.0, 0.25, 0.5, 0.75])
def test_packed_layer_equals_padded_layer(padding, rng):
    p, lengths, x, valid = _setup(padding, int(rng.integers(2**62)))
    assert abs(1 - valid.mean() - padding) < 0.02  # lengths_for hits the mean padding
    capacity = enc.bucket(int(lengths.sum()), BATCH * MAX_LEN, step=16)
    want = np.asarray(jax.jit(lambda x: enc.layer_padded(p, x, lengths, heads=SMALL["heads"]))(x))
    got = np.asarray(jax.jit(lambda x: enc.encoder_packed(p, x, lengths, heads=SMALL["heads"],
                                                          capacity=capacity))(x))
    np.testing.assert_allclose(got[valid], want[valid], rtol=2e-4, atol=2e-4)
    assert np.all(got[~valid] == 0)


def test_packed_stack_removes_and_rebuilds_once(rng):
    p, lengths, x, valid = _setup(0.5, int(rng.integers(2**62)))
    heads, capacity = SMALL["heads"], int(lengths.sum())

    def padded(x):
        return enc.layer_padded(p, enc.layer_padded(p, x, lengths, heads=heads), lengths, heads=heads)

    def packed(x):
        o = jaxnorm.padding_offsets(lengths, MAX_LEN, capacity)
        h = enc.layer_packed(p, enc.layer_packed(p, jaxnorm.remove_padding(x, o), o, heads=heads), o, heads=heads)
        return jaxnorm.rebuild_padding(h, o)

    np.testing.assert_allclose(np.asarray(jax.jit(packed)(x))[valid], np.asarray(jax.jit(padded)(x))[valid],
                               rtol=5e-4, atol=5e-4)
