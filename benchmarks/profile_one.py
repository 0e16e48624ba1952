"""Runs one op once on one shape, for a profiler (ncu) to capture its kernels; a fifth argument
`xla` runs the XLA-compiled reference (jaxnorm.reference) instead, `me` a norm in
memory-efficient mode.

    ncu -k regex:tile_ --section SpeedOfLight --section Occupancy --section WarpStateStats \
        python benchmarks/profile_one.py layer_norm fwd+bwd 131072x1024 bfloat16
"""
import sys

import jax
import numpy as np
import jax.numpy as jnp

import jaxnorm


def main(op, direction, shape, dtype, impl="jaxnorm"):
    rows, cols = (int(v) for v in shape.split("x"))
    # Inputs made on the host, so the profile holds no random-number or conversion kernels.
    g = np.random.default_rng(0)
    x, dy = (jax.device_put(g.standard_normal((rows, cols), np.float32).astype(jnp.dtype(dtype))) for _ in range(2))
    lib = jaxnorm.reference if impl == "xla" else jaxnorm
    me = {"memory_efficient": True} if impl == "me" else {}
    f = {"layer_norm": lambda v: lib.layer_norm(v, jnp.ones(cols), jnp.zeros(cols), **me),
         "rms_norm": lambda v: lib.rms_norm(v, jnp.ones(cols), **me),
         "softmax": lib.softmax, "log_softmax": lib.log_softmax}[op]
    if direction == "fwd":
        run = jax.jit(f)
        out = run(x)
    else:
        run = jax.jit(lambda v, g: jax.vjp(f, v)[1](g))
        out = run(x, dy)
    jax.block_until_ready(out)


if __name__ == "__main__":
    main(*sys.argv[1:6])
