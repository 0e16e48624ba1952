"""Device time of `jaxnorm.sample` over a grid of shapes, for same-call A/B runs of the sampling
kernels: run it once per setting (an environment switch such as JAXNORM_SAMPLING_ONE_READ=0/1, read
at each call), then compare the JSON files it writes.

    python benchmarks/ab_sampling.py LABEL BATCHES DTYPES METHODS [VOCABS]
    python benchmarks/ab_sampling.py rule 1,8,64,256 float32,bfloat16 "top_k=50;no filter" 32000,128256

METHODS are `bench_sampling.METHODS` names, `top_k op k=N`, or `sample` keywords
(`top_p=0.6,temperature=0.8`), `;`-separated. Each line printed is one config's median device time (the JAX profiler's kernel
events, inputs rotated over more memory than L2, as bench_sampling times it) and whether every
drawn token lies in the reference's kept set; the medians go to $OUT/cl-LABEL.json (OUT defaults
to /tmp).

    python benchmarks/ab_sampling.py --compare DIR A B [C ...]

prints, for every config, the best (smallest) time over the runs whose labels start with each
prefix (A the baseline: the others as ratios to it), from DIR's cl-*.json.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxnorm  # noqa: E402

import bench_sampling as bs  # noqa: E402
import device_time as dt  # noqa: E402


def method(name):
    """The function timed for a METHODS entry (or `top_k op k=N`, any N), and its check of
    (logits, output)."""
    if name in bs.METHODS:
        return bs.METHODS[name][0], lambda x, got: bs.check(name, x, got)
    if name.startswith("top_k op k="):
        n = int(name.split("=")[1])
        return (lambda k, x: jaxnorm.top_k(x, n)), lambda x, got: bool(
            np.array_equal(np.asarray(got[1]), np.asarray(jax.lax.top_k(x, n)[1])))
    kw = {k: float(v) if "." in v else int(v) for k, v in (item.split("=") for item in name.split(","))}
    return (lambda k, x: jaxnorm.sample(k, x, **kw)), lambda x, got: bs.check_kept(x, got, kw)


def main(label, batches, dtypes, methods, vocabs="128256"):
    res = {}
    for dtype in dtypes.split(","):
        for v in (int(x) for x in vocabs.split(",")):
            for b in (int(x) for x in batches.split(",")):
                n_in = dt.inputs_for(b * v * jnp.dtype(dtype).itemsize)
                keys = jax.random.split(jax.random.key(0), n_in + 1)
                xs = [(keys[i], (3.0 * jax.random.normal(keys[i], (b, v), jnp.float32)).astype(dtype))
                      for i in range(n_in)]
                for m in methods.split(";"):
                    fn, check = method(m)
                    f = jax.jit(fn)
                    r = dt.device_time(f, xs, reps=3)
                    ok = check(xs[0][1], f(*xs[0]))
                    res[f"{dtype} V={v} B={b} {m}"] = r["median"] * 1e6
                    print(f"{label:6s} {dtype:8s} V={v} B={b:<3d} {m:18s} {r['median'] * 1e6:8.1f} us "
                          f"{'ok' if ok else 'CHECK FAILED'}", flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), f"cl-{label}.json"), "w") as fh:
        json.dump(res, fh)


def compare(folder, base, *others):
    runs = {}
    for name in os.listdir(folder):
        if name.startswith("cl-") and name.endswith(".json"):
            with open(os.path.join(folder, name)) as fh:
                runs[name[3:-5]] = json.load(fh)

    def best(prefix, key):
        times = [r[key] for label, r in runs.items() if label.startswith(prefix) and key in r]
        return min(times) if times else float("nan")

    for key in sorted({k for r in runs.values() for k in r}):
        a = best(base, key)
        cols = "".join(f"  {p} {best(p, key):8.1f} ({best(p, key) / a:.3f})" for p in others)
        print(f"{key:45s} {base} {a:8.1f}{cols}")


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        compare(*sys.argv[2:])
    else:
        main(*sys.argv[1:6])
