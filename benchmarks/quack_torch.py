"""QuACK's kernels (PyTorch + CuTe DSL) in device time, the method of benchmarks/device_time.py
carried to PyTorch: the profiler's CUDA kernel events (CUPTI, as the JAX profiler's), summed per
call, median over calls, inputs rotated past L2, against a copy ceiling measured the same way.

    python benchmarks/quack_torch.py --out DIR [--ops cross_entropy,add_rms_norm]
    python benchmarks/quack_torch.py --out DIR --ops rows [--dtypes bfloat16 --widths 1024,...]

cross_entropy: QuACK's forward (loss and lse), forward + its backward kernel (dlogits from the
saved lse: the same two passes as jaxnorm), and its fused forward that writes dlogits for a unit
cotangent in the same pass (`return_dx`; no jaxnorm counterpart: JAX hands the cotangent to the
backward only). 8192 rows, bf16, vocabularies 128256, 32000, 256000; TB/s counts the logits read
once forward, read twice and dlogits written once forward+backward (as bench_cross_entropy.py).

add_rms_norm: QuACK's RMSNorm with a residual (`rmsnorm_fwd(x, w, residual=r)` -> y, h = x + r)
and its backward with the residual stream's cotangent, bf16, at the shapes of
bench_add_norm.py; TB/s on read x, r + write y, h forward, plus read h, dy, dh + write dx.

rows (rms_norm, layer_norm, softmax; QuACK has no log-softmax): the row ops of bench.py at its
width sweep (2^27 elements per input), forward and forward+backward, the way QuACK's autograd
functions call them: `rmsnorm_fwd(x, w, store_rstd=True)` + `rmsnorm_bwd(x, w, dy, rstd)`;
`layernorm_fwd(x, w, b, return_rstd=True, return_mean=True)` + `layernorm_bwd(x, w, dy, rstd,
mean)`; `softmax_fwd(x)` + `softmax_bwd(dy, y)`. Weight and bias float32, as jaxnorm's; the
forward stores the row statistics in both directions (so each width compiles one forward kernel;
4 bytes a row for RMSNorm, 8 for LayerNorm: at most 0.2% of the forward's bytes at width 1024). The backward's kernels include the torch
sum of QuACK's per-SM weight-gradient partials. Bytes are bench.py's (jaxnorm/_timing.min_bytes),
and every output (y, dx, dw, db) of the first input is checked against torch's float32 op and
its autograd with bench.py's tolerances. bench.py --quack-json merges these rows into its table.
Writes DIR/quack_torch.json (after every width in rows mode).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

L2_FLUSH_BYTES = 200 << 20
ROW_OPS = ("rms_norm", "layer_norm", "softmax")  # bench.py's row ops that QuACK has


def inputs_for(nbytes: int, lo: int = 2, hi: int = 128) -> int:
    return max(lo, min(hi, -(-L2_FLUSH_BYTES // max(nbytes, 1))))


def device_time(f, args, reps=3) -> float:
    """Median over calls of the summed kernel durations of one call, seconds."""
    f(*args[0])
    for a in args[:3]:
        f(*a)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            for a in args:
                f(*a)
        torch.cuda.synchronize()
    kernels = sorted((e.time_range.start, e.time_range.elapsed_us()) for e in prof.events()
                     if e.device_type == DeviceType.CUDA and not e.name.lower().startswith(("memcpy", "memset")))
    calls = reps * len(args)
    per_call = len(kernels) // calls
    if per_call == 0:
        raise RuntimeError("the profiler recorded no CUDA kernel")
    if per_call * calls != len(kernels):
        return sum(d for _, d in kernels) * 1e-6 / calls
    return statistics.median(sum(d for _, d in kernels[i * per_call:(i + 1) * per_call]) for i in range(calls)) * 1e-6


def copy_ceiling() -> float:
    n = 1 << 26
    xs = [(torch.full((n,), float(i), device="cuda"),) for i in range(2)]
    return 2 * n * 4 / device_time(lambda x: x + 1, xs, reps=5)


def bench_cross_entropy(results, ceiling):
    from quack.cross_entropy import cross_entropy_bwd, cross_entropy_fwd

    rows = 8192
    for vocab in (128256, 32000, 256000):
        nbytes = rows * vocab * 2
        g = torch.Generator(device="cuda").manual_seed(vocab)
        xs = [(3 * torch.randn(rows, vocab, device="cuda", generator=g)).to(torch.bfloat16)
              for _ in range(inputs_for(nbytes))]
        labels = torch.randint(0, vocab, (rows,), device="cuda", generator=g, dtype=torch.int64)
        dloss = torch.full((rows,), 1.0 / rows, device="cuda")

        def fwd(x):
            return cross_entropy_fwd(x, labels, return_lse=True)

        def fwd_bwd(x):
            loss, lse = cross_entropy_fwd(x, labels, return_lse=True)
            return loss, cross_entropy_bwd(x, labels, dloss, lse)

        def fused(x):
            return cross_entropy_fwd(x, labels, return_lse=True, return_dx=True)

        # Checked against torch's float32 cross-entropy on the first input.
        loss, lse = fwd(xs[0])
        want = torch.nn.functional.cross_entropy(xs[0].float(), labels, reduction="none")
        ok = bool(torch.allclose(loss, want, rtol=1e-3, atol=1e-3))
        for name, f, nb in (("fwd", fwd, nbytes), ("fwd+bwd", fwd_bwd, 3 * nbytes), ("fused fwd+dx", fused, 2 * nbytes)):
            t = device_time(f, [(x,) for x in xs])
            rec = {"op": "cross_entropy", "impl": "quack", "rows": rows, "vocab": vocab, "dtype": "bfloat16",
                   "direction": name, "us": t * 1e6, "tb_s": nb / t / 1e12, "of_copy": nb / t / ceiling, "ok": ok}
            results.append(rec)
            print(f"quack cross_entropy {rows}x{vocab} {name:13s} {t * 1e6:9.1f} us {nb / t / 1e12:5.2f} TB/s"
                  + ("" if ok else "  CHECK FAILED"), flush=True)
        del xs


def bench_add_rms_norm(results, ceiling, shapes):
    from quack.rmsnorm import rmsnorm_bwd, rmsnorm_fwd

    for rows, cols in shapes:
        nbytes = rows * cols * 2
        n_in = inputs_for(4 * nbytes)
        g = torch.Generator(device="cuda").manual_seed(cols)
        mk = lambda: torch.randn(rows, cols, device="cuda", generator=g).to(torch.bfloat16)  # noqa: E731
        args = [(mk(), mk(), mk(), mk()) for _ in range(n_in)]  # x, r, dy, dh
        w = torch.rand(cols, device="cuda", generator=g)

        def fwd(x, r, dy, dh):
            return rmsnorm_fwd(x, w, residual=r, store_rstd=True)

        def fwd_bwd(x, r, dy, dh):
            y, h, rstd = rmsnorm_fwd(x, w, residual=r, store_rstd=True)
            return rmsnorm_bwd(h, w, dy, rstd, dresidual_out=dh, has_residual=True)

        y, h, rstd = fwd(*args[0])
        hf = args[0][0].float() + args[0][1].float()
        want = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        ok = bool(torch.allclose(y.float(), want, rtol=2e-2, atol=2e-2))
        for name, f, nb in (("fwd", fwd, 4 * nbytes), ("fwd+bwd", fwd_bwd, 8 * nbytes)):
            t = device_time(f, args)
            results.append({"op": "add_rms_norm", "impl": "quack", "rows": rows, "cols": cols, "dtype": "bfloat16",
                            "direction": name, "us": t * 1e6, "tb_s": nb / t / 1e12, "of_copy": nb / t / ceiling,
                            "ok": ok})
            print(f"quack add_rms_norm {rows}x{cols} {name:8s} {t * 1e6:9.1f} us {nb / t / 1e12:5.2f} TB/s"
                  + ("" if ok else "  CHECK FAILED"), flush=True)
        del args


def jaxnorm_timing():
    """jaxnorm's pure-Python timing constants, from the source tree when jaxnorm is not installed
    in torch's environment (gpu_rows.sh with BUILD=0)."""
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from jaxnorm import _timing
    return _timing


def row_calls():
    """QuACK's row ops as its autograd functions call them: op -> (forward, forward+backward), each
    over (x, dy, w, b). Also quack_once.py's, which runs them under ncu."""
    from quack.rmsnorm import layernorm_bwd, layernorm_fwd, rmsnorm_bwd, rmsnorm_fwd
    from quack.softmax import softmax_bwd, softmax_fwd

    eps = jaxnorm_timing().EPSILON

    def rms_fwd(x, dy, w, b):
        return rmsnorm_fwd(x, w, eps=eps, store_rstd=True)[0]

    def rms_fwd_bwd(x, dy, w, b):
        y, _, rstd = rmsnorm_fwd(x, w, eps=eps, store_rstd=True)
        dx, dw, _, _ = rmsnorm_bwd(x, w, dy, rstd)
        return y, dx, dw

    def ln_fwd(x, dy, w, b):
        return layernorm_fwd(x, w, b, eps=eps, return_rstd=True, return_mean=True)[0]

    def ln_fwd_bwd(x, dy, w, b):
        y, rstd, mean = layernorm_fwd(x, w, b, eps=eps, return_rstd=True, return_mean=True)
        return (y, *layernorm_bwd(x, w, dy, rstd, mean, has_bias=True))

    def sm_fwd(x, dy, w, b):
        return softmax_fwd(x)

    def sm_fwd_bwd(x, dy, w, b):
        y = softmax_fwd(x)
        return y, softmax_bwd(dy, y)

    return {"rms_norm": (rms_fwd, rms_fwd_bwd), "layer_norm": (ln_fwd, ln_fwd_bwd), "softmax": (sm_fwd, sm_fwd_bwd)}


def bench_rows(results, ceiling, dtypes, widths, ops, elements, reps, save):
    import torch.nn.functional as F

    T = jaxnorm_timing()
    CHECK_TOL, EPSILON, N_PARAMS, min_bytes = T.CHECK_TOL, T.EPSILON, T.N_PARAMS, T.min_bytes
    calls = row_calls()
    # op -> (forward, forward+backward, torch's float32 op over (x, *params))
    refs = {
        "rms_norm": lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPSILON) * w,
        "layer_norm": lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, EPSILON),
        "softmax": lambda x: torch.softmax(x, -1),
    }
    impls = {op: (*calls[op], refs[op]) for op in calls}

    def worst_ratio(got, want, atol, rtol):
        """bench.py's check: max |a - b| / (atol * max|b| + rtol * |b|) over every output."""
        return max(float(((a.float() - b).abs() / (atol * b.abs().max() + rtol * b.abs()).clamp_min(1e-30)).max())
                   for a, b in zip(got, want))

    for dtype in dtypes:
        tdt = getattr(torch, dtype)
        for cols in widths:
            rows = elements // cols
            g = torch.Generator(device="cuda").manual_seed(cols)
            mk = lambda: torch.randn(rows, cols, device="cuda", generator=g).to(tdt)  # noqa: E731
            args = [(mk(), mk()) for _ in range(inputs_for(2 * rows * cols * tdt.itemsize))]  # x, dy
            w = 1 + 0.1 * torch.randn(cols, device="cuda", generator=g)
            b = 0.1 * torch.randn(cols, device="cuda", generator=g)
            for op in ops:
                fwd, fwd_bwd, ref = impls[op]
                x, dy = args[0]
                x32 = x.to(torch.float32, copy=True).requires_grad_()  # a copy: x may be float32 already
                params = [p.clone().requires_grad_() for p in (w, b)[:N_PARAMS[op]]]
                y32 = ref(x32, *params)
                want = [y32.detach(), *torch.autograd.grad(y32, [x32, *params], dy.float())]
                del x32, y32
                for direction, f in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
                    rec = {"op": op, "impl": "quack", "rows": rows, "cols": cols, "dtype": dtype,
                           "direction": direction}
                    head = f"quack {op:10s} {dtype} {rows}x{cols:<6d} {direction:8s}"
                    try:
                        got = f(x, dy, w, b)
                        ratio = worst_ratio([got] if direction == "fwd" else got, want, *CHECK_TOL[dtype])
                        del got
                        t = device_time(lambda x, dy: f(x, dy, w, b), args, reps=reps)
                        nb = min_bytes(op, direction, rows, cols, tdt.itemsize)
                        rec.update(us=t * 1e6, tb_s=nb / t / 1e12, of_copy=nb / t / ceiling,
                                   worst_ratio=ratio, ok=ratio <= 1.0)
                        print(f"{head} {t * 1e6:9.1f} us {nb / t / 1e12:5.2f} TB/s"
                              + ("" if rec["ok"] else f"  CHECK FAILED ({ratio:.3g})"), flush=True)
                    except Exception as e:  # an unsupported width or dtype: recorded, never fatal
                        rec.update(error=f"{type(e).__name__}: {e}"[:600], ok=False)
                        print(f"{head} ERROR {rec['error'][:200]}", flush=True)
                    results.append(rec)
                del want
            del args
            save()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--ops", default="cross_entropy,add_rms_norm",
                    help=f"comma list of cross_entropy, add_rms_norm, {', '.join(ROW_OPS)}; rows = the last three")
    ap.add_argument("--shapes", default="8192x4096,16384x8192,4096x16384", help="add_rms_norm rows x cols")
    ap.add_argument("--dtypes", default="bfloat16", help="rows: comma list of bfloat16,float16,float32")
    ap.add_argument("--widths", default="1024,4096,16384,32768,65536,131072,262144", help="rows: row widths")
    ap.add_argument("--elements", type=int, default=1 << 27, help="rows: elements per input")
    ap.add_argument("--reps", type=int, default=5, help="rows: rounds over the rotated inputs")
    args = ap.parse_args(argv)
    ceiling = copy_ceiling()
    print(f"torch {torch.__version__}; device time (torch profiler CUDA kernel events); "
          f"copy ceiling {ceiling / 1e12:.2f} TB/s", flush=True)
    results = []
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_tb_s": ceiling / 1e12,
           "method": "device time: torch profiler CUDA kernel events, median over calls, inputs rotated past L2",
           "results": results}
    ops = args.ops.replace("rows", ",".join(ROW_OPS)).split(",")

    def save():
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "quack_torch.json"), "w") as fh:
            json.dump(out, fh, indent=1)

    try:
        if "cross_entropy" in ops:
            bench_cross_entropy(results, ceiling)
        if "add_rms_norm" in ops:
            shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
            bench_add_rms_norm(results, ceiling, shapes)
        row_ops = [op for op in ROW_OPS if op in ops]
        if row_ops:
            bench_rows(results, ceiling, args.dtypes.split(","), [int(w) for w in args.widths.split(",")],
                       row_ops, args.elements, args.reps, save)
    finally:
        save()
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
