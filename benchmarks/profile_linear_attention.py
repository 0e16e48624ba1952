"""Runs causal linear attention once (forward, or forward+backward) on one shape, bf16, for
Nsight Compute to capture its kernels (the state-only launch, the main launch, and the backward's
three transposed launches). Inputs are made on the host, so the profile holds only the op's kernels.

    ncu --section SpeedOfLight --section Occupancy --section WarpStateStats \\
        python benchmarks/profile_linear_attention.py fwd+bwd 1 8 32768 128
"""
import sys

import numpy as np

import jax
import jax.numpy as jnp

import jaxnorm


def main(mode, b, h, length, d):
    g = np.random.default_rng(0)
    q, k = (jax.device_put((np.abs(g.standard_normal((b, h, length, d), np.float32)) + 0.1).astype(jnp.bfloat16))
            for _ in range(2))
    v, ct = (jax.device_put(g.standard_normal((b, h, length, d), np.float32).astype(jnp.bfloat16)) for _ in range(2))
    attend = lambda q, k, v: jaxnorm.linear_attention(q, k, v, feature_map="identity")  # noqa: E731
    if mode == "fwd":
        f = jax.jit(attend)
    else:
        f = jax.jit(jax.grad(lambda q, k, v, ct: jnp.sum(attend(q, k, v).astype(jnp.float32) * ct), argnums=(0, 1, 2)))
    jax.block_until_ready(f(q, k, v) if mode == "fwd" else f(q, k, v, ct))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:6]))
