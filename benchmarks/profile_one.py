"""Runs one op once on one shape, for a profiler (ncu) to capture its kernels.

    ncu -k regex:tile_ --section SpeedOfLight --section Occupancy --section WarpStateStats \
        python benchmarks/profile_one.py layer_norm fwd+bwd 131072x1024 bfloat16
"""
import sys

import jax
import jax.numpy as jnp

import jaxnorm


def main(op, direction, shape, dtype):
    rows, cols = (int(v) for v in shape.split("x"))
    k = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(k[0], (rows, cols), dtype)
    dy = jax.random.normal(k[1], (rows, cols), dtype)
    f = {"layer_norm": lambda v: jaxnorm.layer_norm(v, jnp.ones(cols), jnp.zeros(cols)),
         "rms_norm": lambda v: jaxnorm.rms_norm(v, jnp.ones(cols)),
         "softmax": jaxnorm.softmax, "log_softmax": jaxnorm.log_softmax}[op]
    if direction == "fwd":
        run = jax.jit(f)
        out = run(x)
    else:
        run = jax.jit(lambda v, g: jax.vjp(f, v)[1](g))
        out = run(x, dy)
    jax.block_until_ready(out)


if __name__ == "__main__":
    main(*sys.argv[1:5])
