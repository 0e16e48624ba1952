"""Device time of the row ops' forwards over a few shapes, for same-call A/B runs of the row kernels
(`benchmarks/ab_base.sh` builds and installs each tree in turn and runs this with $LABEL set):

    python benchmarks/ab_rows.py LABEL WIDTHS DTYPES OPS
    python benchmarks/ab_rows.py base1 32768,262144,64x65536 bfloat16,float32 rms_norm,layer_norm
    python benchmarks/ab_rows.py base1 32768,262144 bfloat16 rms_norm+bwd,layer_norm+bwd

A width alone means rows of 2^27 elements in all; ROWSxCOLS names both. OPS: rms_norm, layer_norm
(float32 scale and bias), softmax, log_softmax, masked_softmax, masked_log_softmax (`where=` a
random boolean mask of x's shape, 30% masked; its bytes counted: read once forward, once more
backward), add_rms_norm, add_layer_norm (the residual-add norms, r in x's dtype), each alone (the
forward) or with `+bwd` (the forward and backward: jax.vjp over x and the norm's parameters,
pulled back from a random dy, for the residual-add norms into y and h, as bench.py's and
bench_add_norm.py's fwd+bwd). Each line printed is one shape's median device time (the JAX
profiler's kernel events, inputs rotated over more memory than L2, as bench.py times them) and its TB/s of the
fewest bytes (read x, write y; with the backward also read x or y, read dy, write dx; the
residual-add norms' are bench_add_norm.py's, twice as many); the lines
go to $OUT/rows-LABEL.json too (OUT defaults to /tmp). No output is checked: the suite does that
for the same kernels.

    python benchmarks/ab_rows.py --compare LOG A B [C ...]

prints, for every shape, the best (highest) TB/s over the runs whose labels start with each prefix
(A the baseline: the others as ratios to it), from the lines in LOG (ab_base.sh's ab.log).
"""
import json
import os
import re
import sys

LINE = re.compile(r"\[(\S+)\] (\w+) ([\w+]+)\s+(\d+)x(\d+)\s+([\d.]+)us\s+([\d.]+)TB/s")


def time_rows(label, widths, dtypes, ops):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import jax
    import jax.numpy as jnp

    import jaxnorm
    from device_time import device_time, inputs_for

    out = []
    key = jax.random.key(0)
    for dtype in dtypes:
        for w in widths:
            rows, cols = (int(v) for v in w.split("x")) if "x" in w else ((1 << 27) // int(w), int(w))
            nbytes = 2 * rows * cols * jnp.dtype(dtype).itemsize
            n = inputs_for(nbytes)
            ks = jax.random.split(key, n + 2)
            xs = [jax.random.normal(k, (rows, cols), jnp.float32).astype(dtype) for k in ks[:n]]
            scale = jax.random.normal(ks[n], (cols,), jnp.float32)
            bias = jax.random.normal(ks[n + 1], (cols,), jnp.float32)
            # Each op over (x, the parameters it differentiates in the backward).
            fns = {"layer_norm": (jaxnorm.layer_norm, (scale, bias)), "rms_norm": (jaxnorm.rms_norm, (scale,)),
                   "softmax": (jaxnorm.softmax, ()), "log_softmax": (jaxnorm.log_softmax, ()),
                   "add_layer_norm": (lambda x, s, b, r: jaxnorm.layer_norm(x, s, b, residual=r), (scale, bias)),
                   "add_rms_norm": (lambda x, s, r: jaxnorm.rms_norm(x, s, residual=r), (scale,)),
                   "masked_softmax": (lambda x, w: jaxnorm.softmax(x, where=w), ()),
                   "masked_log_softmax": (lambda x, w: jaxnorm.log_softmax(x, where=w), ())}
            dys = rs = ws = None
            for op in ops:
                name = op.removesuffix("+bwd")
                f, params = fns[name]
                add, masked = name.startswith("add_"), name.startswith("masked_")
                if masked and ws is None:
                    ws = [jax.random.uniform(k, (rows, cols)) >= 0.3 for k in jax.random.split(ks[n], n)]
                if add and rs is None:
                    rs = [jax.random.normal(k, (rows, cols), jnp.float32).astype(dtype)
                          for k in jax.random.split(ks[n], n)]
                if op.endswith("+bwd"):
                    if dys is None:
                        dys = [jax.random.normal(k, (rows, cols), jnp.float32).astype(dtype)
                               for k in jax.random.split(ks[n + 1], n)]
                    if masked:  # the mask closed over
                        fn = jax.jit(lambda dy, w, x, f=f: (lambda y, pull: (y, pull(dy)))(
                            *jax.vjp(lambda x: f(x, w), x)))
                        args, moved = [(dy, w, x) for dy, w, x in zip(dys, ws, xs)], nbytes * 5 // 2 + 2 * rows * cols
                    elif add:  # r closed over; y's and h's cotangents
                        fn = jax.jit(lambda dy, r, *a, f=f: (lambda y, pull: (y, pull((dy, dy))))(
                            *jax.vjp(lambda *a: f(*a, r), *a)))
                        args, moved = [(dy, r, x, *params) for dy, r, x in zip(dys, rs, xs)], nbytes * 4
                    else:
                        fn = jax.jit(lambda dy, *a, f=f: (lambda y, pull: (y, pull(dy)))(*jax.vjp(f, *a)))
                        args, moved = [(dy, x, *params) for dy, x in zip(dys, xs)], nbytes * 5 // 2
                elif masked:
                    fn, args, moved = jax.jit(f), [(x, w) for x, w in zip(xs, ws)], nbytes + rows * cols
                elif add:
                    fn, args, moved = jax.jit(f), [(x, *params, r) for x, r in zip(xs, rs)], nbytes * 2
                else:
                    fn, args, moved = jax.jit(f), [(x, *params) for x in xs], nbytes
                t = device_time(fn, args, reps=5)["median"]
                print(f"[{label}] {dtype} {op:11s} {rows}x{cols} {t * 1e6:9.1f}us {moved / t / 1e12:6.3f}TB/s",
                      flush=True)
                out.append(dict(label=label, dtype=dtype, op=op, rows=rows, cols=cols, us=t * 1e6,
                                tbs=moved / t / 1e12))
            del xs, dys, rs, ws
    with open(os.path.join(os.environ.get("OUT", "/tmp"), f"rows-{label}.json"), "w") as f:
        json.dump(out, f)


def compare(log, prefixes):
    best = {}
    for line in open(log):
        m = LINE.search(line)
        if m:
            label, dtype, op, rows, cols, _, tbs = m.groups()
            pre = next((p for p in prefixes if label.startswith(p)), None)
            if pre is not None:
                key = (dtype, op, int(cols), int(rows))
                best.setdefault(key, {})[pre] = max(float(tbs), best.get(key, {}).get(pre, 0.0))
    base = prefixes[0]
    print("dtype op cols rows | " + " | ".join(f"{p} TB/s" for p in prefixes) + " | " +
          " | ".join(f"{p}/{base}" for p in prefixes[1:]))
    for key in sorted(best):
        b = best[key]
        ratios = [f"{b[p] / b[base]:.3f}" if p in b and base in b else "-" for p in prefixes[1:]]
        print(" ".join(map(str, key)), "|", " | ".join(f"{b[p]:.3f}" if p in b else "-" for p in prefixes), "|",
              " | ".join(ratios))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--compare":
        compare(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 5:
        time_rows(sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), sys.argv[4].split(","))
    else:
        sys.exit(__doc__)
