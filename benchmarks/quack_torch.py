"""QuACK's kernels (PyTorch + CuTe DSL) in device time, the method of benchmarks/device_time.py
carried to PyTorch: the profiler's CUDA kernel events (CUPTI, as the JAX profiler's), summed per
call, median over calls, inputs rotated past L2, against a copy ceiling measured the same way.

    python benchmarks/quack_torch.py --out DIR [--ops cross_entropy,add_rms_norm]

cross_entropy: QuACK's forward (loss and lse), forward + its backward kernel (dlogits from the
saved lse: the same two passes as jaxnorm), and its fused forward that writes dlogits for a unit
cotangent in the same pass (`return_dx`; no jaxnorm counterpart: JAX hands the cotangent to the
backward only). 8192 rows, bf16, vocabularies 128256, 32000, 256000; TB/s counts the logits read
once forward, read twice and dlogits written once forward+backward (as bench_cross_entropy.py).

add_rms_norm: QuACK's RMSNorm with a residual (`rmsnorm_fwd(x, w, residual=r)` -> y, h = x + r)
and its backward with the residual stream's cotangent, bf16, at the shapes of
bench_add_norm.py; TB/s on read x, r + write y, h forward, plus read h, dy, dh + write dx.
Writes DIR/quack_torch.json.
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


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--ops", default="cross_entropy,add_rms_norm")
    ap.add_argument("--shapes", default="8192x4096,16384x8192,4096x16384", help="add_rms_norm rows x cols")
    args = ap.parse_args(argv)
    ceiling = copy_ceiling()
    print(f"torch {torch.__version__}; device time (torch profiler CUDA kernel events); "
          f"copy ceiling {ceiling / 1e12:.2f} TB/s", flush=True)
    results = []
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_tb_s": ceiling / 1e12,
           "method": "device time: torch profiler CUDA kernel events, median over calls, inputs rotated past L2",
           "results": results}
    ops = args.ops.split(",")
    try:
        if "cross_entropy" in ops:
            bench_cross_entropy(results, ceiling)
        if "add_rms_norm" in ops:
            shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
            bench_add_rms_norm(results, ceiling, shapes)
    finally:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "quack_torch.json"), "w") as fh:
            json.dump(out, fh, indent=1)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
