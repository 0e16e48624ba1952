"""Same-call A/B runs of the row forwards of few rows (latency-bound launches): the device time of
jitted RMSNorm, LayerNorm and softmax forwards (the JAX profiler's kernel events) at 1-64 rows x
2048-32768 columns, bf16 and float32, the norms with float32 scale and bias (OPS, or the
comma list in $AB_OPS: rms,ln,softmax), for one build or environment switch
(LABEL; a LABEL starting with "xla" times jaxnorm.reference instead), written to DIR/LABEL.json.
Each output is checked against the reference in float32 (the largest error is printed; a bf16
error above 0.1 or a float32 one above 1e-3 stops the run).

    python benchmarks/ab_small_norm.py LABEL DIR
    python benchmarks/ab_small_norm.py --compare DIR BASE   # min over the runs of each label prefix

Labels may end in a run number (off1, off2: prefix "off"; "r" before the number is dropped too).
"""
import collections
import glob
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

WIDTHS = {"bfloat16": (2048, 4096, 8192, 16384, 32768), "float32": (2048, 4096, 8192, 16384)}
ROWS = (1, 8, 32, 64)
OPS = ("rms", "ln", "softmax")


def run(label, out_dir):
    import jax
    import jax.numpy as jnp

    import jaxnorm
    from device_time import device_time

    os.makedirs(out_dir, exist_ok=True)
    lib = jaxnorm.reference if label.startswith("xla") else jaxnorm
    g = np.random.default_rng(0)
    res = {}
    for dtype, widths in WIDTHS.items():
        dt = jnp.dtype(dtype)
        for d in widths:
            sc = jnp.asarray(1 + 0.1 * g.standard_normal(d), jnp.float32)
            bi = jnp.asarray(g.standard_normal(d), jnp.float32)
            for rows in ROWS:
                xs = [(jnp.asarray(3 + g.standard_normal((rows, d)), dt),) for _ in range(8)]
                for op in os.environ.get("AB_OPS", ",".join(OPS)).split(","):
                    def make(m, op=op):
                        return jax.jit({"rms": lambda x: m.rms_norm(x, sc), "ln": lambda x: m.layer_norm(x, sc, bi),
                                        "softmax": lambda x: m.softmax(x)}[op])
                    f = make(lib)
                    y = np.asarray(f(*xs[0]).astype(jnp.float32))
                    ref = np.asarray(make(jaxnorm.reference)(xs[0][0].astype(jnp.float32)))
                    err = float(np.abs(y - ref).max())
                    t = device_time(f, xs, reps=30)["median"] * 1e6
                    key = f"{dtype} {op} {rows}x{d}"
                    res[key] = t
                    print(f"[{label}] {key:24s} {t:6.2f}us err {err:.3g}", flush=True)
                    if err >= (0.1 if dtype == "bfloat16" else 1e-3):
                        raise SystemExit(f"{key}: error {err}")
    with open(f"{out_dir}/{label}.json", "w") as fh:
        json.dump(res, fh)


def compare(out_dir, base):
    runs = collections.defaultdict(list)
    for path in sorted(glob.glob(f"{out_dir}/*.json")):
        label = os.path.basename(path)[:-5].rstrip("0123456789").rstrip("r")
        with open(path) as fh:
            runs[label].append(json.load(fh))
    best = {lab: {k: min(r[k] for r in rs) for k in rs[0]} for lab, rs in runs.items()}
    labels = sorted(lab for lab in best if best[lab].keys() == best[base].keys())  # other files' runs left out
    print(f"{'config':24s} " + " ".join(f"{lab:>13s}" for lab in labels))
    for k in best[base]:
        print(f"{k:24s} " + " ".join(f"{best[lab][k]:6.2f} ({best[lab][k] / best[base][k]:.2f})" for lab in labels))


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        run(sys.argv[1], sys.argv[2])
