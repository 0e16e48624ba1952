"""Fused residual-add + RMSNorm / LayerNorm (`residual=`) against the unfused pair
`h = x + r; jaxnorm.<norm>(h)` and the plain jnp reference, in device time (JAX profiler kernel
events, benchmarks/device_time.py).

Bytes counted (elements N = rows x cols, b bytes each, h in x's dtype):
  fwd:     read x and r, write y and h                         4 N b
  fwd+bwd: the forward's, then read h, dy and dh, write dx      8 N b
(dx is also r's gradient, the same array; the scale/bias reads and gradients are O(cols).)
The unfused pair moves more (its add reads x, r and writes h, then the norm reads h again; its
backward adds dh to the norm's dx in another pass): TB/s is on the fused op's bytes for every row,
so the ratio of TB/s is the ratio of times.

    python benchmarks/bench_add_norm.py --out DIR            # on the GPU
    python benchmarks/bench_add_norm.py --quick --out DIR    # CPU smoke test (wall clock)
    python benchmarks/bench_add_norm.py --shapes 32768x1024,8192x4096 --dtype float16 --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import device_time as dt  # noqa: E402

import jaxnorm  # noqa: E402
from jaxnorm import reference  # noqa: E402

SHAPES = ((8192, 4096), (16384, 8192), (4096, 16384))


def implementations(norm: str) -> dict:
    """name -> f(x, r, scale, bias) = (y, h)."""
    fn, ref = getattr(jaxnorm, norm), getattr(reference, norm)
    params = (lambda s, b: (s, b)) if norm == "layer_norm" else (lambda s, b: (s,))

    def unfused(x, r, s, b):
        h = x + r
        return fn(h, *params(s, b)), h

    return {
        "fused": lambda x, r, s, b: fn(x, *params(s, b), residual=r),
        "unfused": unfused,
        "jnp": lambda x, r, s, b: ref(x, *params(s, b), residual=r),
    }


def jitted(f):
    """(forward, forward+backward) over (x, r, scale, bias, dy, dh); forward+backward returns the
    forward's (y, h), dx (r's gradient is the same array) and the scale gradient. (y, h) are
    returned, as a training step uses them: left out, XLA dropped the jnp form's forward writes
    (3 N b of its 8 N b) and the comparison was not like for like."""
    fwd = jax.jit(lambda x, r, s, b, dy, dh: f(x, r, s, b))

    def fwd_bwd(x, r, s, b, dy, dh):
        out, pull = jax.vjp(lambda x, s: f(x, r, s, b), x, s)
        return out, pull((dy, dh))

    return fwd, jax.jit(fwd_bwd)


def agree(got, want) -> bool:
    """Within bf16's rounding (2^-7 of the largest magnitude) of the jnp reference."""
    for a, e in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        a, e = np.asarray(a, np.float32), np.asarray(e, np.float32)
        if not np.abs(a - e).max() <= 2.0**-7 * max(np.abs(e).max(), 1.0):
            return False
    return True


def write(out_dir, header, rows):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "add_norm.json"), "w") as fh:
        json.dump({**header, "rows": rows}, fh, indent=1)
    lines = [f"Device: {header['device']}, jax {header['jax']}; {header['method']}; copy ceiling "
             f"{header['copy_tb_s']:.2f} TB/s; TB/s on the fused op's bytes (fwd 4 N b, fwd+bwd 8 N b)", "",
             "| norm | dtype | rows × cols | direction | implementation | µs | TB/s | % ceiling | fused speedup | check |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sp = r["fused_speedup"]
        lines.append(f"| {r['norm']} | {r['dtype']} | {r['rows']} × {r['cols']} | {r['direction']} | {r['impl']} | "
                     f"{r['us']:.1f} | {r['tb_s']:.2f} | {100 * r['tb_s'] / header['copy_tb_s']:.0f} | "
                     f"{'' if sp is None else f'{sp:.2f}×'} | {'ok' if r['ok'] else 'FAIL'} |")
    with open(os.path.join(out_dir, "add_norm.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true", help="CPU smoke test: small shapes, wall clock")
    ap.add_argument("--norms", default="rms_norm,layer_norm")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--shapes", default=None, help="rows x cols list, e.g. 32768x1024,8192x4096 (default: SHAPES)")
    args = ap.parse_args(argv)
    if args.shapes:
        shapes = tuple(tuple(int(n) for n in shape.split("x")) for shape in args.shapes.split(","))
    else:
        shapes = ((64, 512), (32, 1024)) if args.quick else SHAPES
    timer, ceiling, method = dt.bench_method(wall=args.quick)
    header = dt.run_header(method, ceiling)
    print(f"{method}; copy ceiling {ceiling / 1e12:.2f} TB/s", flush=True)
    rows = []
    for norm in args.norms.split(","):
        impls = {name: jitted(f) for name, f in implementations(norm).items()}
        for n_rows, cols in shapes:
            nbytes = n_rows * cols * jnp.dtype(args.dtype).itemsize
            keys = jax.random.split(jax.random.key(cols), dt.inputs_for(4 * nbytes))
            inputs = [tuple(jax.random.normal(k, (n_rows, cols), jnp.float32).astype(args.dtype)
                            for k in jax.random.split(key, 4)) for key in keys]
            s, b = jnp.ones((cols,), jnp.float32), jnp.zeros((cols,), jnp.float32)
            inputs = [(x, r, s, b, dy, dh) for x, r, dy, dh in inputs]
            want = [f(*inputs[0]) for f in impls["jnp"]]
            times = {}
            for name, fs in impls.items():
                ok = all(agree(f(*inputs[0]), w) for f, w in zip(fs, want))
                for direction, f, nb in (("fwd", fs[0], 4 * nbytes), ("fwd+bwd", fs[1], 8 * nbytes)):
                    t = timer(f, inputs, reps=args.reps)["median"]
                    times[name, direction] = t
                    rows.append({"norm": norm, "dtype": args.dtype, "rows": n_rows, "cols": cols,
                                 "direction": direction, "impl": name, "us": t * 1e6, "tb_s": nb / t / 1e12,
                                 "ok": ok})
            dt.add_speedups(rows[-2 * len(impls):], times, "fused", f"{norm:10s} {n_rows}x{cols:<6d}")
            del inputs
            write(args.out, header, rows)
    return dt.checks_passed(rows)


if __name__ == "__main__":
    sys.exit(main())
