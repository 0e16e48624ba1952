"""Sampling benchmark: jaxnorm's sampler and top_k against the jax.numpy paths JAX users write,
in device time (JAX profiler kernel events, benchmarks/device_time.py), same run, same method.

    python benchmarks/bench_sampling.py --out DIR [--quick]

Logits ~ N(0, 3^2); every config rotates distinct inputs larger than L2 together. Reports the
device time per call, the one-read floor (logits bytes / the copy ceiling measured the same way:
`x + 1` over 256 MiB, bytes read + written) and the ratios. Writes DIR/sampling.json and
DIR/sampling.md.

The logits update (at 64 x 128256, float32 and bfloat16 logits, a float32 bias): the sampler
with bias + finished + end_id against the same sampler without, same inputs, same run. With no
row finished the ratio is the fusion's cost (the target: ~1.00); with half the rows finished it
shows what skipping their logits saves.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
import device_time as dt  # noqa: E402

import jaxnorm  # noqa: E402
from jaxnorm import reference  # noqa: E402

K, P, MINP = 50, 0.9, 0.1


# ---- the jax.numpy paths (what users write today) ----------------------------------------------

def jnp_top_k_sample(key, x):
    v, i = jax.lax.top_k(x.astype(jnp.float32), K)
    return jnp.take_along_axis(i, jax.random.categorical(key, v)[..., None], axis=-1)[..., 0]


def _top_p_sorted(key, v, i):
    probs = jax.nn.softmax(v, axis=-1)
    above = jnp.cumsum(probs, axis=-1) - probs
    v = jnp.where(above < P, v, -jnp.inf)
    return jnp.take_along_axis(i, jax.random.categorical(key, v)[..., None], axis=-1)[..., 0]


def jnp_top_p_sample(key, x):
    x = x.astype(jnp.float32)
    i = jnp.argsort(-x, axis=-1)
    return _top_p_sorted(key, jnp.take_along_axis(x, i, axis=-1), i)


def jnp_top_k_top_p_sample(key, x):
    v, i = jax.lax.top_k(x.astype(jnp.float32), K)
    return _top_p_sorted(key, v, i)


def jnp_min_p_sample(key, x):
    x = x.astype(jnp.float32)
    m = jnp.max(x, axis=-1, keepdims=True)
    return jax.random.categorical(key, jnp.where(x - m >= np.log(MINP), x, -jnp.inf))


def jnp_sample(key, x):
    return jax.random.categorical(key, x.astype(jnp.float32))


FILTERS = {"top_k=50": dict(top_k=K), "top_p=0.9": dict(top_p=P), "top_k=50,top_p=0.9": dict(top_k=K, top_p=P),
           "min_p=0.1": dict(min_p=MINP), "no filter": {}}
JNP_SAMPLERS = {"top_k=50": jnp_top_k_sample, "top_p=0.9": jnp_top_p_sample,
                "top_k=50,top_p=0.9": jnp_top_k_top_p_sample, "min_p=0.1": jnp_min_p_sample, "no filter": jnp_sample}
TOP_KS = {"top_k op k=50": 50, "top_k op k=1024": 1024}
METHODS = {  # name: (jaxnorm fn, jnp fn)
    **{name: (lambda k, x, kw=kw: jaxnorm.sample(k, x, **kw), JNP_SAMPLERS[name]) for name, kw in FILTERS.items()},
    **{name: (lambda k, x, n=n: jaxnorm.top_k(x, n), lambda k, x, n=n: jax.lax.top_k(x, n)) for name, n in TOP_KS.items()},
}


def check(name, x, got):
    """Every sampled token lies in the reference's kept set (top_k ops: equal to lax.top_k)."""
    if name in TOP_KS:
        return bool(np.array_equal(np.asarray(got[1]), np.asarray(jax.lax.top_k(x, TOP_KS[name])[1])))
    return check_kept(x, got, FILTERS[name])


def check_kept(x, tokens, kw):
    """Every token lies in the kept set of reference.sampling_mask(x, **kw)."""
    keep = np.asarray(reference.sampling_mask(x, **kw))
    tok = np.asarray(tokens)
    return bool(np.all(tok >= 0) and np.all(keep[np.arange(x.shape[0]), tok]))


UPDATE_B, UPDATE_V, END_ID = 64, 128256, 2
UPDATE_FILTERS = {"top_k=50,top_p=0.9": dict(top_k=K, top_p=P), "no filter": {}}


def logits_update_rows():
    """The fused logits update against the plain sampler (see the module docstring)."""
    rows = []
    for dtype in ("float32", "bfloat16"):
        nbytes = UPDATE_B * UPDATE_V * jnp.dtype(dtype).itemsize
        n_in = dt.inputs_for(nbytes)
        keys = jax.random.split(jax.random.key(3), n_in)
        bias = jax.random.normal(jax.random.key(4), (UPDATE_V,), jnp.float32)
        xs = [(keys[i], (3.0 * jax.random.normal(keys[i], (UPDATE_B, UPDATE_V), jnp.float32)).astype(dtype))
              for i in range(n_in)]
        for fin_name, fin in (("none finished", jnp.zeros(UPDATE_B, bool)),
                              ("half finished", jnp.arange(UPDATE_B) % 2 == 1)):
            for name, kw in UPDATE_FILTERS.items():
                plain = jax.jit(lambda k, x, kw=kw: jaxnorm.sample(k, x, **kw))
                upd = jax.jit(lambda k, x, b, f, kw=kw: jaxnorm.sample(k, x, bias=b, finished=f, end_id=END_ID, **kw))
                args = [(k, x, bias, fin) for k, x in xs]
                r_plain = dt.device_time(plain, xs, reps=3)
                r_upd = dt.device_time(upd, args, reps=3)
                tok = np.asarray(upd(*args[0]))
                keep = np.asarray(reference.sampling_mask(xs[0][1], bias=bias, **kw))
                f_np = np.asarray(fin)
                ok = bool(np.all(tok[f_np] == END_ID) and np.all(keep[np.arange(UPDATE_B), tok][~f_np]))
                rec = {"dtype": dtype, "batch": UPDATE_B, "vocab": UPDATE_V, "method": name, "finished": fin_name,
                       "plain_us": r_plain["median"] * 1e6, "update_us": r_upd["median"] * 1e6,
                       "update_kernels": r_upd["kernels"], "ok": ok}
                rows.append(rec)
                print(f"{dtype:8s} B={UPDATE_B} V={UPDATE_V} {name:20s} bias+finished ({fin_name}) "
                      f"{rec['update_us']:8.1f} us vs plain {rec['plain_us']:8.1f} us: "
                      f"{rec['update_us'] / rec['plain_us']:.3f}x" + ("" if ok else "  CHECK FAILED"), flush=True)
    return rows


def write(out_dir, rows, ceiling, update_rows=()):
    out = {"device": str(jax.devices()[0].device_kind), "jax": jax.__version__, "copy_tb_s": ceiling / 1e12,
           "method": "device time: JAX profiler kernel events, median over calls, inputs rotated past L2",
           "rows": rows, "logits_update": list(update_rows)}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "sampling.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    with open(os.path.join(out_dir, "sampling.md"), "w") as fh:
        fh.write(f"Device: {out['device']}, jax {out['jax']}; copy ceiling {ceiling / 1e12:.2f} TB/s (device time)\n\n")
        fh.write("| dtype | batch | vocab | method | jaxnorm µs | × floor | jnp µs | speedup | check |\n|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            jr, us = r.get("jnp_us"), r["jaxnorm_us"]
            jtxt, sp = ("", "") if jr is None else (f"{jr:.1f}", f"{jr / us:.1f}×")
            fh.write(f"| {r['dtype']} | {r['batch']} | {r['vocab']} | {r['method']} | {us:.1f} | "
                     f"{us / r['floor_us']:.2f} | {jtxt} | {sp} | {'ok' if r['ok'] else 'FAIL'} |\n")
        if update_rows:
            fh.write("\nLogits update (bias + finished + end_id) against the same sampler without:\n\n"
                     "| dtype | batch | vocab | method | finished | plain µs | update µs | ratio | check |\n"
                     "|---|---|---|---|---|---|---|---|---|\n")
            for r in update_rows:
                fh.write(f"| {r['dtype']} | {r['batch']} | {r['vocab']} | {r['method']} | {r['finished']} | "
                         f"{r['plain_us']:.1f} | {r['update_us']:.1f} | {r['update_us'] / r['plain_us']:.3f} | "
                         f"{'ok' if r['ok'] else 'FAIL'} |\n")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true", help="batch 1 and 64, vocab 128256 only")
    ap.add_argument("--jnp-budget", type=float, default=150.0, help="seconds for the jnp paths")
    args = ap.parse_args(argv)
    batches = (1, 64) if args.quick else (1, 8, 64, 256)
    vocabs = (128256,) if args.quick else (32000, 128256, 151936, 256000)
    ceiling = dt.copy_ceiling()
    print(f"copy ceiling (x + 1, 256 MiB, device time): {ceiling / 1e12:.2f} TB/s", flush=True)
    update_rows = logits_update_rows()
    rows = []
    t_jnp = 0.0
    for dtype in ("float32", "bfloat16"):
        for v in vocabs:
            for b in batches:
                nbytes = b * v * jnp.dtype(dtype).itemsize
                n_in = dt.inputs_for(nbytes)
                keys = jax.random.split(jax.random.key(0), n_in + 1)
                xs = [(keys[i], (3.0 * jax.random.normal(keys[i], (b, v), jnp.float32)).astype(dtype))
                      for i in range(n_in)]
                floor = nbytes / ceiling
                for name, (fj, fx) in METHODS.items():
                    rec = {"dtype": dtype, "batch": b, "vocab": v, "method": name, "floor_us": floor * 1e6}
                    f = jax.jit(fj)
                    r = dt.device_time(f, xs, reps=3)
                    rec.update(jaxnorm_us=r["median"] * 1e6, jaxnorm_kernels=r["kernels"],
                               ok=check(name, xs[0][1], f(*xs[0])))
                    headline = b == 64 and v == 128256
                    if (headline or t_jnp < args.jnp_budget) and (dtype == "float32" or headline):
                        t0 = time.perf_counter()
                        rx = dt.device_time(jax.jit(fx), xs[: max(2, min(4, n_in))], reps=2)
                        t_jnp += time.perf_counter() - t0
                        rec["jnp_us"] = rx["median"] * 1e6
                    rows.append(rec)
                    jr = rec.get("jnp_us")
                    print(f"{dtype:8s} B={b:<4d} V={v:<7d} {name:20s} jaxnorm {rec['jaxnorm_us']:9.1f} us "
                          f"({rec['jaxnorm_us'] / rec['floor_us']:5.2f}x floor {rec['floor_us']:7.1f})"
                          + (f"  jnp {jr:9.1f} us  speedup {jr / rec['jaxnorm_us']:7.1f}x" if jr else "")
                          + ("" if rec["ok"] else "  CHECK FAILED"), flush=True)
            write(args.out, rows, ceiling, update_rows)  # after each vocabulary, so a cut-off run keeps its rows
    bad = [r for r in rows + update_rows if not r["ok"]]
    print(f"{len(rows) + len(update_rows) - len(bad)}/{len(rows) + len(update_rows)} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
