"""Runs one sampling op once (default: 64 x 128256 float32 logits), for Nsight Compute to capture:

    ncu -k regex:select_rows --section SpeedOfLight --section WarpStateStats \\
        python benchmarks/profile_sampling.py top_p [batch vocab dtype]
"""
import sys

import numpy as np

import jax
import jax.numpy as jnp

import jaxnorm

KW = {"top_k": dict(top_k=50), "top_p": dict(top_p=0.9), "top_k_top_p": dict(top_k=50, top_p=0.9), "none": {}}


def main(which="top_p", batch=64, vocab=128256, dtype="float32"):
    x = jax.device_put(3 * np.random.default_rng(0).standard_normal((int(batch), int(vocab)), np.float32)).astype(dtype)
    if which.startswith("top_k_op"):
        out = jax.jit(lambda x: jaxnorm.top_k(x, int(which.split("=")[1])))(x)
    else:
        out = jax.jit(lambda k, x: jaxnorm.sample(k, x, **KW[which]))(jax.random.key(0), x)
    jax.block_until_ready(out)


if __name__ == "__main__":
    main(*sys.argv[1:5])
