"""TEMP A/B of the fused reduced CE kernels: device time of value_and_grad(mean) and the two-kernel path."""
import json, os, sys
sys.path.insert(0, "benchmarks")
import jax, jax.numpy as jnp, numpy as np
import device_time as dt, jaxnorm
label, out = sys.argv[1], sys.argv[2]
fused = jax.jit(jax.value_and_grad(lambda x, y: jaxnorm.softmax_cross_entropy(x, y, reduction="mean")))
two = jax.jit(jax.value_and_grad(lambda x, y: jnp.mean(jaxnorm.softmax_cross_entropy(x, y))))
res = {}
for dtype, v in [("bfloat16", 128256), ("bfloat16", 32000), ("float32", 128256), ("bfloat16", 256000), ("float32", 32000)]:
    rows = 8192; nb = rows * v * jnp.dtype(dtype).itemsize
    keys = jax.random.split(jax.random.key(v), dt.inputs_for(nb))
    xs = [((3.0 * jax.random.normal(k, (rows, v), jnp.float32)).astype(dtype), jax.random.randint(k, (rows,), 0, v, jnp.int32)) for k in keys]
    (l1, g1), (l2, g2) = fused(*xs[0]), two(*xs[0])
    err = float(jnp.max(jnp.abs(g1.astype(jnp.float32) - g2.astype(jnp.float32)))) / float(jnp.max(jnp.abs(g2.astype(jnp.float32))))
    for name, f in (("fused", fused), ("two", two)):
        t = dt.device_time(f, xs, reps=3)["median"] * 1e6
        res[f"{dtype} {v} {name}"] = t
        print(f"{label} {dtype} 8192x{v} {name:6s} {t:8.1f} us  {(2 if name == 'fused' else 3) * nb / t / 1e6:5.2f} TB/s  loss {float(l1):.6f}/{float(l2):.6f} rel dx diff {err:.2e}", flush=True)
    del xs
    json.dump(res, open(f"{out}/ce-ab-{label}.json", "w"))
