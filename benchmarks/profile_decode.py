"""Runs one decode-attention step once (jaxnorm, or `jax.nn.dot_product_attention` with cuDNN) on
one shape, for Nsight Compute to capture its kernels. Inputs are made on the host, so the profile
holds only the step's kernels.

    ncu --section SpeedOfLight --section Occupancy python benchmarks/profile_decode.py jaxnorm 1 4096 32 8 128
"""
import sys

import numpy as np

import jax
import jax.numpy as jnp

import jaxnorm


def main(impl, b, L, hq, hkv, d):
    g = np.random.default_rng(0)
    q = jax.device_put(g.standard_normal((b, hq, d), np.float32).astype(jnp.bfloat16))
    if impl == "jaxnorm":
        k, v = (jax.device_put(g.standard_normal((b, hkv, L, d), np.float32).astype(jnp.bfloat16)) for _ in range(2))
        f = jax.jit(lambda q, k, v, n: jaxnorm.decode_attention(q, k, v, n))
    else:
        k, v = (jax.device_put(g.standard_normal((b, L, hkv, d), np.float32).astype(jnp.bfloat16)) for _ in range(2))
        f = jax.jit(lambda q, k, v, n: jax.nn.dot_product_attention(
            q[:, None], k, v, key_value_seq_lengths=n, implementation="cudnn")[:, 0])
    lengths = jax.device_put(np.full((b,), L, np.int32))
    jax.block_until_ready(f(q, k, v, lengths))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:7]))
