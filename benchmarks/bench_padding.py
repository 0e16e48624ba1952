"""Padding-removal benchmark (the padding family): each op's bandwidth, and a BERT-base encoder
layer padded against packed, in device time (JAX profiler kernel events, benchmarks/device_time.py),
same run, same method.

    python benchmarks/bench_padding.py --out DIR [--quick] [--wall]

Shape: batch 32 x max_len 512, hidden 768, 12 heads, bfloat16 (BERT-base). Lengths are drawn with
an average padding of 0%, 25%, 50% and 75% (examples/packed_encoder.py: lengths_for), and the
capacity is the token count rounded up to a multiple of 512 (a bucket).

Ops: the fewest bytes each must move (valid rows read once, every output element written once,
the index map read once) over its device time, against the copy ceiling (`x + 1`, 256 MiB)
measured the same way; the jax.numpy gathers of jaxnorm.reference are timed beside them. Every
output is checked equal to the reference's.

Encoder layer (examples/packed_encoder.py): padded (`layer_padded`), packed end to end
(`encoder_packed`: offsets, remove_padding, the layer, rebuild_padding) and one packed layer alone
(`layer_packed`: what each layer of a packed stack costs). Outputs of the padded and packed forms
are compared at the valid positions.

--wall times in wall clock instead (a smoke test where no GPU profiler is; not comparable).
Writes DIR/padding.json and DIR/padding.md.
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
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
import device_time as dt  # noqa: E402
import packed_encoder as enc  # noqa: E402

import jaxnorm  # noqa: E402
from jaxnorm import reference  # noqa: E402

PADDINGS = (0.0, 0.25, 0.5, 0.75)


def op_cases(lengths, max_len, capacity, hidden, heads, dtype):
    """(name, jaxnorm fn, reference fn, input shapes, bytes moved), over one batch's offsets."""
    offsets = jaxnorm.padding_offsets(lengths, max_len, capacity)
    batch, tokens = lengths.shape[0], int(lengths.sum())
    el = jnp.dtype(dtype).itemsize
    n, hd = batch * max_len, hidden // heads
    bhld, blhd = (batch, heads, max_len, hd), (batch, max_len, heads, hd)
    bias = jnp.linspace(-1, 1, 3 * hidden, dtype=jnp.float32)

    def qkv(layout, fn):
        return lambda x: fn(x, bias, offsets, heads, layout=layout)

    def tr(layout, fn):
        return lambda x: fn(x, offsets, layout=layout)

    return offsets, [
        ("padding_offsets", lambda l: jaxnorm.padding_offsets(l, max_len, capacity),
         lambda l: reference.padding_offsets(l, max_len, capacity), None, 4 * (2 * batch + n + capacity)),
        ("remove_padding", lambda x: jaxnorm.remove_padding(x, offsets),
         lambda x: reference.remove_padding(x, offsets), (batch, max_len, hidden),
         (tokens + capacity) * hidden * el + 4 * capacity),
        ("rebuild_padding", lambda x: jaxnorm.rebuild_padding(x, offsets),
         lambda x: reference.rebuild_padding(x, offsets), (capacity, hidden), (tokens + n) * hidden * el + 4 * n),
        *[(f"add_qkv_bias_rebuild_padding {lay}", qkv(lay, jaxnorm.add_qkv_bias_rebuild_padding),
           qkv(lay, reference.add_qkv_bias_rebuild_padding), (capacity, 3 * hidden),
           3 * (tokens + n) * hidden * el + 4 * n + 4 * 3 * hidden) for lay in ("BHLD", "BLHD")],
        *[(f"transpose_remove_padding {lay}", tr(lay, jaxnorm.transpose_remove_padding),
           tr(lay, reference.transpose_remove_padding), shape, (tokens + capacity) * hidden * el + 4 * capacity)
          for lay, shape in (("BHLD", bhld), ("BLHD", blhd))],
    ]


def same(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


def same_size_copies(timer, rng, args) -> dict:
    """TB/s of `x + 1` over [batch * max_len, hidden * m] of the benchmark's dtype (m = 1, 3): copies
    as small as the ops' (ceiling: 256 MiB), timed the same way."""
    out = {}
    for m in (1, 3):
        shape = (args.batch * args.max_len, args.hidden * m)
        n_in = dt.inputs_for(int(np.prod(shape)) * jnp.dtype(args.dtype).itemsize)
        xs = [(jnp.asarray(rng.normal(size=shape), args.dtype),) for _ in range(n_in)]
        t = timer(jax.jit(lambda x: x + 1), xs, reps=5)["median"]
        nbytes = 2 * int(np.prod(shape)) * jnp.dtype(args.dtype).itemsize
        out[f"{shape[0]}x{shape[1]}"] = nbytes / t / 1e12
        print(f"same-size copy x + 1 over {shape}: {t * 1e6:.1f} us, {nbytes / t / 1e12:.2f} TB/s", flush=True)
    return out


def bench_ops(timer, rng, args, ceiling, paddings):
    rows = []
    for padding in paddings:
        lengths = enc.lengths_for(rng, args.batch, args.max_len, padding)
        capacity = enc.bucket(int(lengths.sum()), args.batch * args.max_len)
        _, cases = op_cases(lengths, args.max_len, capacity, args.hidden, args.heads, args.dtype)
        for name, fj, fr, shape, nbytes in cases:
            if shape is None:
                inputs = [(lengths,)]
            else:
                n_in = dt.inputs_for(int(np.prod(shape)) * jnp.dtype(args.dtype).itemsize)
                inputs = [(jnp.asarray(rng.normal(size=shape), args.dtype),) for _ in range(n_in)]
            jf, jr = jax.jit(fj), jax.jit(fr)
            t = timer(jf, inputs, reps=5)["median"]
            tr = timer(jr, inputs, reps=3)["median"]
            ok = same(jf(*inputs[0]), jr(*inputs[0]))
            rec = dict(padding=padding, tokens=int(lengths.sum()), capacity=capacity, op=name, bytes=nbytes,
                       jaxnorm_us=t * 1e6, jnp_us=tr * 1e6, tb_s=nbytes / t / 1e12,
                       frac_copy=nbytes / t / ceiling, ok=ok)
            rows.append(rec)
            print(f"pad {padding:4.2f} {name:36s} jaxnorm {t * 1e6:8.1f} us {rec['tb_s']:5.2f} TB/s "
                  f"({100 * rec['frac_copy']:3.0f}% of copy)  jnp {tr * 1e6:8.1f} us  {tr / t:5.2f}x"
                  + ("" if ok else "  CHECK FAILED"), flush=True)
    return rows


def bench_encoder(timer, rng, args, paddings):
    p = enc.init_params(jax.random.key(0), hidden=args.hidden, heads=args.heads, mlp=args.mlp, dtype=args.dtype)
    rows = []
    for padding in paddings:
        lengths = enc.lengths_for(rng, args.batch, args.max_len, padding)
        capacity = enc.bucket(int(lengths.sum()), args.batch * args.max_len)
        heads = args.heads
        n_in = dt.inputs_for(args.batch * args.max_len * args.hidden * jnp.dtype(args.dtype).itemsize, lo=2, hi=8)
        xs = [jnp.asarray(rng.normal(size=(args.batch, args.max_len, args.hidden)), args.dtype) for _ in range(n_in)]
        offsets = jaxnorm.padding_offsets(lengths, args.max_len, capacity)
        padded = jax.jit(lambda x: enc.layer_padded(p, x, lengths, heads=heads))
        packed = jax.jit(lambda x: enc.encoder_packed(p, x, lengths, heads=heads, capacity=capacity))
        layer = jax.jit(lambda x: enc.layer_packed(p, x, offsets, heads=heads))
        rec = dict(padding=padding, tokens=int(lengths.sum()), capacity=capacity)
        times = {}
        for name, f, ins in (("padded", padded, xs), ("packed", packed, xs),
                             ("packed layer", layer, [jaxnorm.remove_padding(x, offsets) for x in xs])):
            r = timer(f, [(x,) for x in ins], reps=5)
            times[name] = r["median"]
            rec[f"{name}_kernels"] = r["kernels"]
        valid = np.arange(args.max_len)[None, :] < np.asarray(lengths)[:, None]
        a = np.asarray(padded(xs[0]), np.float32)
        b = np.asarray(packed(xs[0]), np.float32)
        rec["max_abs_diff_valid"] = float(np.abs(a - b)[valid].max())
        rec["ok"] = bool(rec["max_abs_diff_valid"] < 0.25 and np.all(b[~valid] == 0))
        rec.update({f"{k.replace(' ', '_')}_us": v * 1e6 for k, v in times.items()})
        rec["speedup"] = times["padded"] / times["packed"]
        rec["speedup_layer"] = times["padded"] / times["packed layer"]
        rows.append(rec)
        print(f"encoder pad {padding:4.2f} tokens {rec['tokens']:6d} capacity {capacity:6d}: padded "
              f"{rec['padded_us']:8.1f} us, packed {rec['packed_us']:8.1f} us ({rec['speedup']:.2f}x), "
              f"packed layer {rec['packed_layer_us']:8.1f} us ({rec['speedup_layer']:.2f}x); max diff at valid "
              f"positions {rec['max_abs_diff_valid']:.3g}" + ("" if rec["ok"] else "  CHECK FAILED"), flush=True)
    return rows


def write(out_dir, out):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "padding.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    with open(os.path.join(out_dir, "padding.md"), "w") as fh:
        fh.write(f"Device: {out['device']}, jax {out['jax']}; {out['method']}; copy ceiling "
                 f"{out['copy_tb_s']:.2f} TB/s measured the same way. Shape: batch {out['batch']} x max_len "
                 f"{out['max_len']}, hidden {out['hidden']}, {out['heads']} heads, {out['dtype']}. Copies as "
                 "small as the ops (`x + 1`, same method): "
                 + ", ".join(f"{k}: {v:.2f} TB/s" for k, v in out.get("copy_same_size_tb_s", {}).items()) + ".\n\n")
        fh.write("| padding | tokens | capacity | op | jaxnorm µs | TB/s | % of copy | jnp µs | jnp / jaxnorm | check |\n"
                 "|---|---|---|---|---|---|---|---|---|---|\n")
        for r in out["ops"]:
            fh.write(f"| {r['padding']:.0%} | {r['tokens']} | {r['capacity']} | {r['op']} | {r['jaxnorm_us']:.1f} | "
                     f"{r['tb_s']:.2f} | {100 * r['frac_copy']:.0f}% | {r['jnp_us']:.1f} | "
                     f"{r['jnp_us'] / r['jaxnorm_us']:.2f}× | {'ok' if r['ok'] else 'FAIL'} |\n")
        fh.write("\n| padding | tokens | capacity | padded µs | packed (remove + layer + rebuild) µs | speedup | "
                 "packed layer alone µs | speedup | max diff at valid positions | check |\n"
                 "|---|---|---|---|---|---|---|---|---|---|\n")
        for r in out["encoder"]:
            fh.write(f"| {r['padding']:.0%} | {r['tokens']} | {r['capacity']} | {r['padded_us']:.1f} | "
                     f"{r['packed_us']:.1f} | {r['speedup']:.2f}× | {r['packed_layer_us']:.1f} | "
                     f"{r['speedup_layer']:.2f}× | {r['max_abs_diff_valid']:.3g} | {'ok' if r['ok'] else 'FAIL'} |\n")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true", help="paddings 0%% and 50%% only")
    ap.add_argument("--wall", action="store_true", help="wall clock instead of device time (smoke test)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--mlp", type=int, default=3072)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--no-encoder", action="store_true")
    args = ap.parse_args(argv)
    args.dtype = jnp.dtype(args.dtype)
    timer, ceiling, method = dt.bench_method(args.wall)
    paddings = (0.0, 0.5) if args.quick else PADDINGS
    rng = np.random.default_rng(0)
    print(f"{method}; copy ceiling {ceiling / 1e12:.2f} TB/s", flush=True)
    out = dict(dt.run_header(method, ceiling), batch=args.batch, max_len=args.max_len, hidden=args.hidden,
               heads=args.heads, dtype=str(args.dtype), ops=[], encoder=[])
    out["copy_same_size_tb_s"] = same_size_copies(timer, rng, args)
    out["ops"] = bench_ops(timer, rng, args, ceiling, paddings)
    write(args.out, out)
    if not args.no_encoder:
        out["encoder"] = bench_encoder(timer, rng, args, paddings)
        write(args.out, out)
    bad = [r for r in out["ops"] + out["encoder"] if not r["ok"]]
    n = len(out["ops"]) + len(out["encoder"])
    print(f"{n - len(bad)}/{n} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
