"""Embedding lookup + sine position encoding benchmark: jaxnorm.embed_with_position against its jnp
reference (an XLA gather + elementwise; XLA's scatter-add for the backward), forward and
forward + backward, in device time (JAX profiler kernel events, benchmarks/device_time.py).

    python benchmarks/bench_embedding.py --out DIR [--quick] [--wall]

Shapes: tokens in {64, 4096, 32768} x d in {768, 4096}, bfloat16, vocab 128256 (Llama 3), ids
uniform over the vocabulary, per-token positions 0..tokens-1 (a prompt).

Bytes that must move: forward = ids + positions read (4 + 4 bytes a token) + the gathered rows read
+ the output written (2 * tokens * d * 2 bytes); backward = dout read + the whole dtable written
(tokens * d * 2 + vocab * d * 2 bytes, the ids' sort not counted). The forward + backward line
counts both. GB/s = those bytes over the device time, beside the copy ceiling (`x + 1`, 256 MiB)
measured the same way. Outputs are checked against the reference (forward: within a bfloat16 ulp;
gradient: within a bfloat16 ulp of the reference's in float32 (XLA's bfloat16 scatter-add rounds
every addition)).

--wall times in wall clock instead (a smoke test where no GPU profiler is; not comparable).
Writes DIR/embedding.json and DIR/embedding.md.
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
from jaxnorm import reference  # noqa: E402

TOKENS = (64, 4096, 32768)
DIMS = (768, 4096)


def fns(impl):
    def fwd(ids, pos, table):
        return impl(ids, table, position=pos)

    def fwd_bwd(ids, pos, table, ct):
        out, vjp = jax.vjp(lambda t: impl(ids, t, position=pos), table)
        return out, vjp(ct)[0]

    return jax.jit(fwd), jax.jit(fwd_bwd)


def close(a, b, dtype) -> bool:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    tol = 2.0 ** -7 if np.dtype(dtype) == np.dtype(jnp.bfloat16) else 2.0 ** -10
    return bool(np.all(np.abs(a - b) <= tol * np.maximum(np.abs(b), 1.0)))


def bench(timer, rng, args, tokens_list, dims):
    rows = []
    el = jnp.dtype(args.dtype).itemsize
    for d in dims:
        table = jnp.asarray(rng.normal(size=(args.vocab, d)) * 0.02, args.dtype)
        for tokens in tokens_list:
            n_in = dt.inputs_for(tokens * d * el * 2)
            ins = [(jnp.asarray(rng.integers(0, args.vocab, size=tokens), jnp.int32),
                    jnp.arange(tokens, dtype=jnp.int32), table) for _ in range(n_in)]
            cts = [jnp.asarray(rng.normal(size=(tokens, d)), args.dtype) for _ in range(2)]
            fwd_bytes = tokens * (8 + 2 * d * el)
            bwd_bytes = tokens * d * el + args.vocab * d * el
            (jf, jfb), (rf, rfb) = fns(jaxnorm.embed_with_position), fns(reference.embed_with_position)
            rec = dict(tokens=tokens, d=d, vocab=args.vocab, fwd_bytes=fwd_bytes, fwd_bwd_bytes=fwd_bytes + bwd_bytes)
            rec["jaxnorm_fwd_us"] = timer(jf, ins, reps=5)["median"] * 1e6
            rec["jnp_fwd_us"] = timer(rf, ins, reps=3)["median"] * 1e6
            fb_ins = [(*a, cts[i % 2]) for i, a in enumerate(ins[: max(2, min(len(ins), 4))])]
            rec["jaxnorm_fwd_bwd_us"] = timer(jfb, fb_ins, reps=3)["median"] * 1e6
            rec["jnp_fwd_bwd_us"] = timer(rfb, fb_ins, reps=3)["median"] * 1e6
            for k in ("jaxnorm", "jnp"):
                rec[f"{k}_fwd_gb_s"] = fwd_bytes / rec[f"{k}_fwd_us"] / 1e3
                rec[f"{k}_fwd_bwd_gb_s"] = rec["fwd_bwd_bytes"] / rec[f"{k}_fwd_bwd_us"] / 1e3
            o1, g1 = jfb(*fb_ins[0])
            o2, _ = rfb(*fb_ins[0])
            ids0, pos0, _, ct0 = fb_ins[0]  # the gradient's reference: float32 sums of the same cotangent
            _, g2 = rfb(ids0, pos0, table.astype(jnp.float32), ct0.astype(jnp.float32))
            rec["ok"] = close(o1, o2, args.dtype) and close(g1, g2, args.dtype)
            rows.append(rec)
            print(f"tokens {tokens:6d} d {d:5d}: fwd jaxnorm {rec['jaxnorm_fwd_us']:9.1f} us "
                  f"({rec['jaxnorm_fwd_gb_s']:7.1f} GB/s)  jnp {rec['jnp_fwd_us']:9.1f} us "
                  f"({rec['jnp_fwd_gb_s']:7.1f} GB/s) | fwd+bwd jaxnorm {rec['jaxnorm_fwd_bwd_us']:9.1f} us "
                  f"({rec['jaxnorm_fwd_bwd_gb_s']:7.1f} GB/s)  jnp {rec['jnp_fwd_bwd_us']:9.1f} us "
                  f"({rec['jnp_fwd_bwd_gb_s']:7.1f} GB/s)" + ("" if rec["ok"] else "  CHECK FAILED"), flush=True)
    return rows


def write(out_dir, out):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "embedding.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    with open(os.path.join(out_dir, "embedding.md"), "w") as fh:
        fh.write(f"Device: {out['device']}, jax {out['jax']}; {out['method']}; copy ceiling "
                 f"{out['copy_gb_s']:.0f} GB/s measured the same way. {out['dtype']}, vocab {out['vocab']}, "
                 "per-token positions (sine encoding). GB/s: the bytes that must move (module docstring).\n\n")
        fh.write("| tokens | d | fwd jaxnorm µs | GB/s | fwd jnp µs | GB/s | jnp / jaxnorm | fwd+bwd jaxnorm µs | "
                 "GB/s | fwd+bwd jnp µs | GB/s | jnp / jaxnorm | check |\n|" + "---|" * 13 + "\n")
        for r in out["rows"]:
            fh.write(f"| {r['tokens']} | {r['d']} | {r['jaxnorm_fwd_us']:.1f} | {r['jaxnorm_fwd_gb_s']:.0f} | "
                     f"{r['jnp_fwd_us']:.1f} | {r['jnp_fwd_gb_s']:.0f} | {r['jnp_fwd_us'] / r['jaxnorm_fwd_us']:.2f}× | "
                     f"{r['jaxnorm_fwd_bwd_us']:.1f} | {r['jaxnorm_fwd_bwd_gb_s']:.0f} | {r['jnp_fwd_bwd_us']:.1f} | "
                     f"{r['jnp_fwd_bwd_gb_s']:.0f} | {r['jnp_fwd_bwd_us'] / r['jaxnorm_fwd_bwd_us']:.2f}× | "
                     f"{'ok' if r['ok'] else 'FAIL'} |\n")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true", help="tokens 64 and 4096, d 768 only (vocab 8192 with --wall)")
    ap.add_argument("--wall", action="store_true", help="wall clock instead of device time (smoke test)")
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args(argv)
    args.dtype = jnp.dtype(args.dtype)
    if args.quick and args.wall and args.vocab == 128256:
        args.vocab = 8192  # a CPU smoke test: the dense gradient of the full vocabulary is slow there
    timer, ceiling, method = dt.bench_method(args.wall)
    tokens_list, dims = ((64, 4096), (768,)) if args.quick else (TOKENS, DIMS)
    rng = np.random.default_rng(0)
    print(f"{method}; copy ceiling {ceiling / 1e9:.0f} GB/s", flush=True)
    out = dict(dt.run_header(method, ceiling), copy_gb_s=ceiling / 1e9, vocab=args.vocab, dtype=str(args.dtype),
               rows=[])
    out["rows"] = bench(timer, rng, args, tokens_list, dims)
    write(args.out, out)
    bad = [r for r in out["rows"] if not r["ok"]]
    print(f"{len(out['rows']) - len(bad)}/{len(out['rows'])} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
