"""Decode attention benchmark: one decoding step's attention over a KV cache, jaxnorm against
`jax.nn.dot_product_attention` (implementation "xla" and "cudnn") and the einsum form users write,
in device time (JAX profiler kernel events, benchmarks/device_time.py), same run, same method.

    python benchmarks/bench_decode.py --out DIR [--quick] [--wall]

Bytes: one read of the valid K and V rows (every sequence full here), over the device time,
against the copy ceiling (`x + 1`, 256 MiB) measured the same way. Competitors get the cache in
their own layout ([B, L, Hkv, D]); jaxnorm is timed on its default layout (BHLD) and on theirs
(BLHD). The append form (write the new token, then attend) is timed too. Every output is checked
against the float32 einsum form.

--wall times in wall clock instead (a smoke test where no GPU profiler is; not comparable).
Writes DIR/decode.json and DIR/decode.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

import jax
import jax.numpy as jnp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import device_time as dt  # noqa: E402

import jaxnorm  # noqa: E402

# batch, context, q_heads, kv_heads, head_dim (bf16): Llama-3-8B's GQA 32:8 from batch 1 to 64,
# contexts 4K-128K, plus multi-head and head_dim 64 / 256.
SHAPES = [
    (1, 4096, 32, 8, 128), (1, 32768, 32, 8, 128), (1, 131072, 32, 8, 128), (2, 8192, 32, 8, 128),
    (4, 4096, 32, 8, 128), (8, 4096, 32, 8, 128), (8, 32768, 32, 8, 128), (32, 8192, 32, 8, 128),
    (64, 4096, 32, 8, 128),
    (8, 32768, 32, 32, 128), (8, 16384, 16, 16, 64), (4, 16384, 16, 4, 256),
]
QUICK = [(1, 4096, 32, 8, 128), (8, 32768, 32, 8, 128), (1, 131072, 32, 8, 128)]


def einsum_attention(q, k, v, lengths):
    """The form users write: float32 scores over the whole cache, masked ([B, L, Hkv, D] caches)."""
    b, hq, d = q.shape
    hkv = k.shape[2]
    qg = q.reshape(b, hkv, hq // hkv, d).astype(jnp.float32)
    s = jnp.einsum("bhgd,blhd->bhgl", qg, k.astype(jnp.float32)) * d**-0.5
    mask = jnp.arange(k.shape[1])[None, None, None, :] < lengths[:, None, None, None]
    p = jax.nn.softmax(jnp.where(mask, s, -jnp.inf), axis=-1)
    return jnp.einsum("bhgl,blhd->bhgd", p, v.astype(jnp.float32)).reshape(b, hq, d).astype(q.dtype)


def dpa(impl):
    def f(q, k, v, lengths):
        out = jax.nn.dot_product_attention(q[:, None], k, v, key_value_seq_lengths=lengths, implementation=impl)
        return out[:, 0]
    return f


READ_FLOOR = "read K, V (XLA max)"


def candidates():
    return {
        "jaxnorm BHLD": lambda q, k, v, l: jaxnorm.decode_attention(q, k, v, l),
        "jaxnorm BLHD": lambda q, k, v, l: jaxnorm.decode_attention(q, k, v, l, layout="BLHD"),
        "jax dpa xla": dpa("xla"),
        "jax dpa cudnn": dpa("cudnn"),
        "einsum": einsum_attention,
    }


def bench_shape(timer, rng, shape, ceiling, dtype, impls=None):
    b, L, hq, hkv, d = shape
    el = jnp.dtype(dtype).itemsize
    kv_bytes = 2 * b * L * hkv * d * el
    n_in = dt.inputs_for(kv_bytes, lo=2, hi=16)
    lengths = jnp.full((b,), L, jnp.int32)
    key = jax.random.key(int(rng.integers(1 << 30)))
    ins = []
    for i in range(n_in):
        k1, k2, k3, key = jax.random.split(key, 4)
        ins.append((jax.random.normal(k1, (b, hq, d), dtype), jax.random.normal(k2, (b, L, hkv, d), dtype),
                    jax.random.normal(k3, (b, L, hkv, d), dtype)))
    blhd = [(q, k, v, lengths) for q, k, v in ins]
    to_bhld = jax.jit(lambda x: x.transpose(0, 2, 1, 3))
    bhld = [(q, to_bhld(k), to_bhld(v), lengths) for q, k, v in ins]
    want = np.asarray(jax.jit(einsum_attention)(*blhd[0]).astype(jnp.float32))
    rows = []
    for name, f in candidates().items():
        if impls and not any(name.startswith(i) for i in impls):
            continue
        args = bhld if name == "jaxnorm BHLD" else blhd
        jf = jax.jit(f)
        try:
            r = timer(jf, args, reps=5)
        except Exception as e:  # noqa: BLE001 - a competitor that cannot run this shape
            print(f"  {name:16s} fails: {repr(e)[:150]}", flush=True)
            rows.append(dict(shape=shape, impl=name, error=repr(e)[:300]))
            continue
        got = np.asarray(jf(*args[0]).astype(jnp.float32))
        err = float(np.abs(got - want).max())
        rec = dict(shape=shape, impl=name, us=r["median"] * 1e6, tb_s=kv_bytes / r["median"] / 1e12,
                   frac_copy=kv_bytes / r["median"] / ceiling, kernels=r["kernels_per_call"], max_err=err,
                   ok=err < 0.05, by_kernel_us={n: t * 1e6 for n, t in r.get("by_kernel", {}).items()})
        rows.append(rec)
        print(f"  {name:16s} {rec['us']:9.1f} us {rec['tb_s']:5.2f} TB/s ({100 * rec['frac_copy']:3.0f}% of copy)"
              f"  kernels {rec['kernels']}  max err {err:.3g}" + ("" if rec["ok"] else "  CHECK FAILED"), flush=True)
        if name in ("jaxnorm BHLD", "jax dpa cudnn") and len(rec["by_kernel_us"]) > 1:
            print("      " + ", ".join(f"{dt.short_kernel_name(n)} {t:.1f}" for n, t in rec["by_kernel_us"].items()), flush=True)
    # What reading these bytes costs at this size: XLA's max over head_dim of K and of V (one read,
    # a 1/D-sized write), a floor no attention kernel beats; small caches do not reach the copy
    # ceiling, which is measured on 256 MiB.
    if not impls or any("read".startswith(i) for i in impls):
        rf = timer(jax.jit(lambda q, k, v, l: (jnp.max(k, axis=-1), jnp.max(v, axis=-1))), blhd, reps=5)
        rows.append(dict(shape=shape, impl=READ_FLOOR, us=rf["median"] * 1e6, tb_s=kv_bytes / rf["median"] / 1e12,
                         frac_copy=kv_bytes / rf["median"] / ceiling, ok=True))
        print(f"  {'read K, V (XLA)':16s} {rf['median'] * 1e6:9.1f} us {kv_bytes / rf['median'] / 1e12:5.2f} TB/s "
              "(a max over head_dim: the read floor at this size)", flush=True)
    # The append form in a decoding loop: the caches carried through lax.fori_loop are updated in
    # place; the marginal cost of a step is (t(32 steps) - t(16 steps)) / 16, which leaves out the
    # one copy XLA makes of caches that the benchmark does not donate.
    kn = jax.random.normal(key, (b, hkv, d), dtype)

    def loop(steps):
        def run(q, k, v, lengths):
            def body(i, c):
                k, v, acc = c
                o, k, v = jaxnorm.decode_attention(q, k, v, lengths + i, k_new=kn, v_new=kn)
                return k, v, acc + o.astype(jnp.float32)
            return jax.lax.fori_loop(0, steps, body, (k, v, jnp.zeros(q.shape, jnp.float32)))[2]
        return jax.jit(run)

    start = jnp.full((b,), L - 32, jnp.int32)
    t16, t32 = (timer(loop(n), [(q, k, v, start) for q, k, v, _ in bhld[:2]], reps=3)["median"] for n in (16, 32))
    step = (t32 - t16) / 16
    rows.append(dict(shape=shape, impl="jaxnorm BHLD append (loop step)", us=step * 1e6, tb_s=kv_bytes / step / 1e12,
                     frac_copy=kv_bytes / step / ceiling, ok=True))
    print(f"  {'append, per step':16s} {step * 1e6:9.1f} us {kv_bytes / step / 1e12:5.2f} TB/s "
          "(in a fori_loop, caches updated in place)", flush=True)
    return rows


def write(out_dir, out):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "decode.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    impls = list(candidates()) + ["jaxnorm BHLD append (loop step)", READ_FLOOR]
    with open(os.path.join(out_dir, "decode.md"), "w") as fh:
        fh.write(f"Device: {out['device']}, jax {out['jax']}; {out['method']}; copy ceiling {out['copy_tb_s']:.2f} TB/s "
                 f"measured the same way. {out['dtype']}, every sequence full; bytes = one read of K and V.\n\n")
        fh.write("| B | context | Hq:Hkv | D | KV MiB | " + " | ".join(f"{i} µs (TB/s)" for i in impls)
                 + " | best other / jaxnorm BHLD |\n|" + "---|" * (6 + len(impls)) + "\n")
        by = {}
        for r in out["rows"]:
            by.setdefault(tuple(r["shape"]), {})[r["impl"]] = r
        for shape, rs in by.items():
            b, L, hq, hkv, d = shape
            cells = []
            for i in impls:
                r = rs.get(i)
                cells.append("fails" if r is None or "error" in r else
                             f"{r['us']:.1f} ({r['tb_s']:.2f})" + ("" if r["ok"] else " FAIL"))
            others = [rs[i]["us"] for i in impls
                      if not i.startswith("jaxnorm") and i != READ_FLOOR and i in rs and "us" in rs[i]]
            ratio = (min(others) / rs["jaxnorm BHLD"]["us"]) if others and "us" in rs.get("jaxnorm BHLD", {}) else float("nan")
            mib = 2 * b * L * hkv * d * jnp.dtype(out["dtype"]).itemsize / 2**20
            fh.write(f"| {b} | {L} | {hq}:{hkv} | {d} | {mib:.0f} | " + " | ".join(cells) + f" | {ratio:.2f}× |\n")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true", help="three shapes only")
    ap.add_argument("--wall", action="store_true", help="wall clock instead of device time (smoke test)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--impls", nargs="*", help="only the implementations whose names start so (e.g. jaxnorm)")
    args = ap.parse_args(argv)
    dtype = jnp.dtype(args.dtype)
    timer, ceiling, method = dt.bench_method(args.wall)
    shapes = QUICK if args.quick else SHAPES
    if args.wall:  # CPU smoke test: the same shapes, 32x shorter contexts
        shapes = [(b, L // 32, hq, hkv, d) for b, L, hq, hkv, d in shapes[:3]]
    rng = np.random.default_rng(0)
    print(f"{method}; copy ceiling {ceiling / 1e12:.2f} TB/s", flush=True)
    out = dict(dt.run_header(method, ceiling), dtype=str(dtype), rows=[])
    for shape in shapes:
        print(f"B={shape[0]} context={shape[1]} Hq:Hkv={shape[2]}:{shape[3]} D={shape[4]}", flush=True)
        out["rows"] += bench_shape(timer, rng, shape, ceiling, dtype, args.impls)
        write(args.out, out)
    bad = [r for r in out["rows"] if r["impl"].startswith("jaxnorm") and not r.get("ok")]
    n = sum(r["impl"].startswith("jaxnorm") for r in out["rows"])
    print(f"{n - len(bad)}/{n} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
