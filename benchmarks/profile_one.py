"""Runs one op on one shape (once, or CALLS times), for a profiler (ncu) to capture its kernels; a
fifth argument `xla` runs the XLA-compiled reference (jaxnorm.reference) instead, `me` a norm in
memory-efficient mode, `jaxnorm` jaxnorm's op; add_layer_norm / add_rms_norm are the residual-add norms (r in x's dtype,
outputs y and h). fwd+bwd pulls back over x and the norms' scale
and bias, as bench.py does (and QuACK's backward computes; quack_once.py).

    ncu -k regex:tile_ --section SpeedOfLight --section Occupancy --section WarpStateStats \
        python benchmarks/profile_one.py layer_norm fwd+bwd 131072x1024 bfloat16
    python benchmarks/profile_one.py rms_norm fwd 4096x32768 bfloat16 jaxnorm 3   # ncu_cells.sh
"""
import sys

import jax
import numpy as np
import jax.numpy as jnp

import jaxnorm


def main(op, direction, shape, dtype, impl="jaxnorm", calls="1"):
    rows, cols = (int(v) for v in shape.split("x"))
    # Inputs made on the host, so the profile holds no random-number or conversion kernels.
    g = np.random.default_rng(0)
    x, dy, r = (jax.device_put(g.standard_normal((rows, cols), np.float32).astype(jnp.dtype(dtype))) for _ in range(3))
    # The parameters as arguments too: as constants, XLA may broadcast them in a kernel of its own.
    w, b = (jax.device_put(np.full(cols, v, np.float32)) for v in (1.0, 0.0))
    lib = jaxnorm.reference if impl == "xla" else jaxnorm
    me = {"memory_efficient": True} if impl == "me" else {}
    f, params = {"layer_norm": (lambda v, w, b: lib.layer_norm(v, w, b, **me), (w, b)),
                 "rms_norm": (lambda v, w: lib.rms_norm(v, w, **me), (w,)),
                 "add_layer_norm": (lambda v, r, w, b: lib.layer_norm(v, w, b, residual=r, **me), (r, w, b)),
                 "add_rms_norm": (lambda v, r, w: lib.rms_norm(v, w, residual=r, **me), (r, w)),
                 "softmax": (lib.softmax, ()), "log_softmax": (lib.log_softmax, ())}[op]
    if direction == "fwd":
        run, args = jax.jit(f), (x, *params)
    else:
        cot = (dy, dy) if op.startswith("add_") else dy  # y's and h's
        run, args = jax.jit(lambda g, *a: jax.vjp(f, *a)[1](g)), (cot, x, *params)
    for _ in range(int(calls)):
        out = run(*args)
    jax.block_until_ready(out)


if __name__ == "__main__":
    main(*sys.argv[1:7])
