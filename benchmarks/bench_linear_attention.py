"""Causal linear attention benchmark: `jaxnorm.linear_attention` against the chunked jax.numpy form
a JAX user writes and flash-linear-attention's `chunk_linear_attn` (PyTorch + Triton, `--fla`),
forward and forward+backward, bf16, in device time (benchmarks/device_time.py), same run, same
inputs.

    python benchmarks/bench_linear_attention.py --out DIR [--quick] [--wall] [--fla]

The setting: q and k are made positive once, outside the timing (elu + 1, as the reference
feature map), and every implementation gets those mapped inputs: jaxnorm with
feature_map="identity", fla with scale=1, so all do the same work; causal, normalize=True (eps
1e-6 for jaxnorm and the jnp form; fla adds 1e-10 to its normalizer, which at these lengths is
nowhere near the normalizer's own rounding). Forward+backward is the jitted jax.grad of
sum(out * ct) w.r.t. q, k, v (ct a fixed random cotangent); for fla, torch.autograd.grad of the
output with ct.

FLOPs (what TFLOP/s divides): the chunked algorithm at chunk C = 64, per chunk of every (batch,
head) row, head dims Dk, Dv: scores 2·C²·Dk, intra-chunk 2·C²·Dv, inter-chunk 2·C·Dk·Dv, state
update 2·C·Dk·Dv -- the full C x C score block (as tensor cores compute it, mask included), the
normalizer's O(C·Dk) terms and the elementwise work not counted. Forward+backward counts 3x the
forward (backward = 2x forward). The bytes of one read of q, k, v and one write of out
(forward; forward+backward adds the reads of ct and the writes of dq, dk, dv) are recorded too,
for the memory-bound reading against the copy ceiling.

Timing: jaxnorm and the jnp form with the JAX profiler's kernel events (sum of the kernels of
one jitted call, median over calls, inputs rotated past L2; the per-kernel split is recorded);
fla with torch.profiler's CUDA kernel records, the same sum and median over the same rotated
inputs (`--fla-timer events` instead: CUDA events around each call after an L2 flush, which
counts the gaps between fla's launches too). `--wall`: wall clock (a smoke test where no GPU
profiler is; not comparable).

Checks: every timed output (out, and dq, dk, dv) against the same chunked form computed in
float32 at HIGHEST precision on the same (bf16-valued) inputs, relative L2 error; that float32
form is itself checked against the quadratic `jaxnorm.reference.linear_attention` (and its
gradients) on a small shape at the start of the run. fla's outputs are also compared with
jaxnorm's. Writes DIR/linear_attention.json and DIR/linear_attention.md; exits 1 when a check
fails or jaxnorm errors.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import jax
import jax.numpy as jnp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import device_time as dt  # noqa: E402

import jaxnorm  # noqa: E402
from jaxnorm import reference  # noqa: E402

CHUNK = 64
EPS = 1e-6
# (batch, heads, len, d) with Dk = Dv = d, bf16.
SHAPES = [(8, 16, 4096, 64), (2, 16, 16384, 64), (1, 8, 32768, 128), (1, 16, 65536, 128)]
QUICK = [(2, 8, 2048, 64), (1, 4, 8192, 128)]
WALL_QUICK = [(1, 4, 512, 64), (1, 2, 1024, 128)]  # CPU smoke test
TOL = {"out": 2e-2, "dq": 3e-2, "dk": 3e-2, "dv": 3e-2}  # relative L2 error against the float32 form
IMPLS = ("jaxnorm", "jnp chunked", "fla")
DIRECTIONS = ("fwd", "fwd+bwd")


def flops(shape, chunk=CHUNK):
    """Forward and forward+backward FLOPs of the chunked algorithm (module docstring)."""
    b, h, length, d = shape
    dk = dv = d
    per_chunk = 2 * chunk * chunk * dk + 2 * chunk * chunk * dv + 2 * chunk * dk * dv + 2 * chunk * dk * dv
    fwd = b * h * -(-length // chunk) * per_chunk
    return {"fwd": fwd, "fwd+bwd": 3 * fwd}


def min_bytes(shape, itemsize):
    b, h, length, d = shape
    one = b * h * length * d * itemsize
    return {"fwd": 4 * one, "fwd+bwd": 8 * one}


def jnp_chunked(q, k, v, *, eps=EPS, chunk=CHUNK, precision=None):
    """Causal normalized linear attention as a JAX user writes it, [B, H, L, D], L a multiple of
    `chunk`: masked scores inside each chunk, and the state before each chunk as an exclusive
    cumulative sum over chunks of the chunks' K^T V (float32; the normalizer's sum of k likewise).
    As jaxnorm does, 16-bit inputs meet 16-bit scores and state in the products (float32
    accumulation); float32 inputs stay float32 (pass precision=HIGHEST for a float32 reference)."""
    b, h, length, dk = q.shape
    dv = v.shape[3]
    n = length // chunk
    if n * chunk != length:
        raise ValueError(f"jnp_chunked: len {length} is not a multiple of {chunk}")
    f32, dtype = jnp.float32, q.dtype
    qc, kc, vc = (x.reshape(b, h, n, chunk, x.shape[3]) for x in (q, k, v))
    s = jnp.einsum("bhnik,bhnjk->bhnij", qc, kc, preferred_element_type=f32, precision=precision)
    s = jnp.where(jnp.tril(jnp.ones((chunk, chunk), bool)), s, 0.0)
    num = jnp.einsum("bhnij,bhnjv->bhniv", s.astype(dtype), vc, preferred_element_type=f32, precision=precision)
    kv = jnp.einsum("bhnjk,bhnjv->bhnkv", kc, vc, preferred_element_type=f32, precision=precision)
    state = jnp.cumsum(kv, axis=2) - kv  # the state before each chunk
    num = num + jnp.einsum("bhnik,bhnkv->bhniv", qc, state.astype(dtype), preferred_element_type=f32,
                           precision=precision)
    ksum = kc.astype(f32).sum(axis=3)  # [b, h, n, dk]
    z = jnp.cumsum(ksum, axis=2) - ksum
    den = s.sum(axis=-1) + jnp.einsum("bhnik,bhnk->bhni", qc.astype(f32), z, precision=precision)
    return (num / (den[..., None] + eps)).astype(dtype).reshape(b, h, length, dv)


def jaxnorm_la(q, k, v):
    return jaxnorm.linear_attention(q, k, v, causal=True, feature_map="identity", normalize=True, eps=EPS)


def with_grad(f):
    """(q, k, v, ct) -> (out, (dq, dk, dv)): forward+backward of sum(out * ct)."""
    def loss(q, k, v, ct):
        out = f(q, k, v)
        return jnp.sum(out.astype(jnp.float32) * ct.astype(jnp.float32)), out

    def run(q, k, v, ct):
        (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v, ct)
        return out, grads
    return run


@jax.jit
def _rel_err(got, want):
    want = want.astype(jnp.float32)
    return jnp.linalg.norm((got.astype(jnp.float32) - want).ravel()) / jnp.linalg.norm(want.ravel())


def rel_errs(got, want):
    """{name: relative L2 error} for out (and dq, dk, dv)."""
    names = ("out", "dq", "dk", "dv")
    flat_got = [got[0], *got[1]] if isinstance(got, tuple) else [got]
    flat_want = [want[0], *want[1]] if isinstance(want, tuple) else [want]
    return {n: float(_rel_err(g, w)) for n, g, w in zip(names, flat_got, flat_want)}


def check_jnp_form():
    """The float32 chunked form against the quadratic reference (forward and gradients)."""
    keys = jax.random.split(jax.random.key(7), 4)
    shape = (1, 2, 4 * CHUNK, 64)
    q, k = (jax.nn.elu(jax.random.normal(x, shape, jnp.float32)) + 1 for x in keys[:2])
    v, ct = (jax.random.normal(x, shape, jnp.float32) for x in keys[2:])
    chunked = with_grad(lambda q, k, v: jnp_chunked(q, k, v, precision=jax.lax.Precision.HIGHEST))
    ref = with_grad(lambda q, k, v: reference.linear_attention(q, k, v, feature_map="identity", eps=EPS))
    errs = rel_errs(jax.jit(chunked)(q, k, v, ct), jax.jit(ref)(q, k, v, ct))
    return dict(shape=shape, dtype="float32", rel_err=errs, ok=all(e < 1e-4 for e in errs.values()))


# ---- flash-linear-attention (PyTorch): its own timer, the same rotation and median ----


def fla_available():
    try:
        import torch
        from fla.ops.linear_attn import chunk_linear_attn  # noqa: F401
    except Exception as e:  # noqa: BLE001 - absent, or fails to import
        return f"not importable: {repr(e)[:200]}"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    import fla
    return f"fla {fla.__version__}, torch {torch.__version__}"


def fla_fns():
    import torch
    from fla.ops.linear_attn import chunk_linear_attn

    def fwd(q, k, v, ct):
        with torch.no_grad():
            return chunk_linear_attn(q, k, v, scale=1.0, normalize=True)[0]

    def fwd_bwd(q, k, v, ct):
        out = chunk_linear_attn(q, k, v, scale=1.0, normalize=True)[0]
        return out, torch.autograd.grad(out, (q, k, v), ct)
    return {"fwd": fwd, "fwd+bwd": fwd_bwd}


def torch_timer(kind):
    """A timer for torch callables with device_time's interface (seconds per call)."""
    import torch

    def warm(f, args):
        f(*args[0])
        for a in args[: min(len(args), 3)]:
            f(*a)
        torch.cuda.synchronize()

    def profiler(f, args, *, reps=5):
        from torch.profiler import ProfilerActivity, profile
        warm(f, args)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                for a in args:
                    f(*a)
            torch.cuda.synchronize()
        events = sorted((e.time_range.start, e.time_range.elapsed_us() * 1e-6, e.name) for e in prof.events()
                        if e.device_type == torch.autograd.DeviceType.CUDA
                        and not e.name.lower().startswith(("memcpy", "memset")))
        if not events:
            raise RuntimeError("torch.profiler recorded no CUDA kernel")
        return _summarize(events, reps * len(args))

    def events(f, args, *, reps=5):
        warm(f, args)
        flush = torch.empty(dt.L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        times = []
        for _ in range(reps):
            for a in args:
                flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                f(*a)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e-3)
        return {"mean": sum(times) / len(times), "median": statistics.median(times), "kernels_per_call": None,
                "kernels": []}

    def wall(f, args, *, reps=5):
        warm(f, args)
        times = []
        for _ in range(reps):
            for a in args:
                t0 = time.perf_counter()
                f(*a)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
        return {"mean": sum(times) / len(times), "median": statistics.median(times), "kernels_per_call": None,
                "kernels": []}

    methods = {
        "profiler": "torch.profiler CUDA kernel records: sum of one call's kernel durations, median over calls, "
                    "inputs rotated past L2",
        "events": "CUDA events around each call after a 200 MiB L2 flush (gaps between launches included), "
                  "median over calls",
        "wall": "wall clock with torch.cuda.synchronize (smoke test)",
    }
    return {"profiler": profiler, "events": events, "wall": wall}[kind], methods[kind]


def _summarize(events, calls):
    """device_time's reduction of (start, seconds, name) kernel records over `calls` calls."""
    total = sum(d for _, d, _ in events)
    per_call = len(events) // calls
    median = total / calls
    if per_call * calls == len(events):
        median = statistics.median(sum(d for _, d, _ in events[i * per_call:(i + 1) * per_call])
                                   for i in range(calls))
    by_kernel: dict[str, float] = {}
    for _, d, n in events:
        by_kernel[n] = by_kernel.get(n, 0.0) + d / calls
    return {"mean": total / calls, "median": median, "kernels_per_call": len(events) / calls,
            "kernels": sorted({n for _, _, n in events[: max(per_call, 1)]}), "by_kernel": by_kernel}


def to_torch_blhd(x, requires_grad=False):
    """A JAX [B, H, L, D] array as a contiguous torch [B, L, H, D] tensor (fla's layout)."""
    import torch
    t = torch.from_dlpack(x).transpose(1, 2).contiguous()
    return t.requires_grad_(requires_grad)


def from_torch_blhd(t):
    return jnp.from_dlpack(t.detach().transpose(1, 2).contiguous())


# ---- one shape ----


def record(shape, impl, direction, r, errs, dtype):
    fl = flops(shape)[direction]
    nbytes = min_bytes(shape, jnp.dtype(dtype).itemsize)[direction]
    ok = all(e < TOL[n] for n, e in errs.items())
    return dict(shape=shape, impl=impl, direction=direction, us=r["median"] * 1e6, mean_us=r["mean"] * 1e6,
                tflop_s=fl / r["median"] / 1e12, tb_s=nbytes / r["median"] / 1e12, flop=fl, bytes=nbytes,
                kernels=r["kernels_per_call"], rel_err=errs, ok=ok,
                by_kernel_us={n: t * 1e6 for n, t in r.get("by_kernel", {}).items()})


def report(rec, ceiling):
    pct = f" ({100 * rec['tb_s'] * 1e12 / ceiling:3.0f}% of copy)" if ceiling == ceiling else ""
    errs = " ".join(f"{n} {e:.2g}" for n, e in rec["rel_err"].items())
    print(f"  {rec['impl']:12s} {rec['direction']:8s} {rec['us']:10.1f} us {rec['tflop_s']:7.2f} TFLOP/s "
          f"{rec['tb_s']:5.2f} TB/s{pct}  kernels {rec['kernels']}  rel err {errs}"
          + ("" if rec["ok"] else "  CHECK FAILED"), flush=True)
    if rec["impl"] != "jnp chunked" and len(rec["by_kernel_us"]) > 1:
        print("      " + ", ".join(f"{dt.short_kernel_name(n)} {t:.1f}" for n, t in rec["by_kernel_us"].items()),
              flush=True)


def shape_inputs(shape, dtype):
    """The rotated input sets (q, k positive; v; the cotangent) and the float32 truth on the first:
    the same for the JAX phase and the fla phase (made from fixed keys)."""
    b, h, length, d = shape
    n_in = dt.inputs_for(4 * b * h * length * d * jnp.dtype(dtype).itemsize, lo=2, hi=8)

    @jax.jit
    def make(key):
        kq, kk, kv, kc = jax.random.split(key, 4)
        phi = lambda x: (jax.nn.elu(x.astype(jnp.float32)) + 1).astype(dtype)  # noqa: E731 - elu+1, once
        return (phi(jax.random.normal(kq, shape, dtype)), phi(jax.random.normal(kk, shape, dtype)),
                jax.random.normal(kv, shape, dtype), jax.random.normal(kc, shape, dtype))

    ins = [make(jax.random.key(1000 * length + 10 * d + i)) for i in range(n_in)]
    out, grads = _truth(*(x.astype(jnp.float32) for x in ins[0]))
    return ins, {"fwd": out, "fwd+bwd": (out, grads)}


_truth = jax.jit(with_grad(lambda q, k, v: jnp_chunked(q, k, v, precision=jax.lax.Precision.HIGHEST)))
_JAX_IMPLS = {"jaxnorm": jaxnorm_la, "jnp chunked": jnp_chunked}
_jitted: dict = {}


def jax_call(impl, direction):
    """The jitted call of a JAX implementation, (q, k, v, ct) -> out or (out, grads); cached."""
    if (impl, direction) not in _jitted:
        f = _JAX_IMPLS[impl]
        if direction == "fwd":
            jf = jax.jit(f)
            _jitted[impl, direction] = lambda q, k, v, ct: jf(q, k, v)
        else:
            _jitted[impl, direction] = jax.jit(with_grad(f))
    return _jitted[impl, direction]


def bench_shape_jax(timer, ceiling, shape, dtype, reps):
    ins, truth = shape_inputs(shape, dtype)
    rows = []
    for impl in _JAX_IMPLS:
        for direction in DIRECTIONS:
            call = jax_call(impl, direction)
            try:
                errs = rel_errs(jax.block_until_ready(call(*ins[0])), truth[direction])
                r = timer(call, ins, reps=reps)
            except Exception as e:  # noqa: BLE001 - an implementation that cannot run this shape
                print(f"  {impl:12s} {direction:8s} fails: {repr(e)[:200]}", flush=True)
                rows.append(dict(shape=shape, impl=impl, direction=direction, error=repr(e)[:400], ok=False))
                continue
            rows.append(record(shape, impl, direction, r, errs, dtype))
            report(rows[-1], ceiling)
    return rows


class FlaTimer:
    """torch.profiler (or the method asked for); falls back to CUDA events, for the rest of the
    run, when the profiler records no kernel (CUPTI already taken, say). `method` says which."""

    def __init__(self, kind):
        self.kind = kind
        self.timer, self.method = torch_timer(kind)

    def __call__(self, f, args, *, reps):
        try:
            return self.timer(f, args, reps=reps)
        except RuntimeError as e:
            if self.kind != "profiler":
                raise
            print(f"  torch.profiler failed ({repr(e)[:120]}); CUDA events from here on", flush=True)
            self.kind = "events"
            self.timer, method = torch_timer("events")
            self.method = f"{method} (torch.profiler recorded no kernel)"
            return self.timer(f, args, reps=reps)


def bench_shape_fla(fla_timer, ceiling, shape, dtype, reps, jaxnorm_ok):
    """fla on the JAX phase's inputs (made again), checked against the truth and jaxnorm's output."""
    ins, truth = shape_inputs(shape, dtype)
    rows = []
    try:
        tins = [tuple(to_torch_blhd(x, requires_grad=i < 3) for i, x in enumerate(a)) for a in ins]
    except Exception as e:  # noqa: BLE001
        print(f"  fla: inputs not converted: {repr(e)[:200]}", flush=True)
        return [dict(shape=shape, impl="fla", direction=d, error=repr(e)[:400], ok=False) for d in DIRECTIONS]
    fns = fla_fns()
    for direction in DIRECTIONS:
        f = fns[direction]
        try:
            got = f(*tins[0])
            got = (from_torch_blhd(got) if direction == "fwd"
                   else (from_torch_blhd(got[0]), tuple(from_torch_blhd(g) for g in got[1])))
            errs = rel_errs(got, truth[direction])
            vs_jaxnorm = (rel_errs(got, jax_call("jaxnorm", direction)(*ins[0]))
                          if jaxnorm_ok.get((tuple(shape), direction)) else None)
            del got
            r = fla_timer(f, tins, reps=reps)
        except Exception as e:  # noqa: BLE001
            print(f"  {'fla':12s} {direction:8s} fails: {repr(e)[:200]}", flush=True)
            rows.append(dict(shape=shape, impl="fla", direction=direction, error=repr(e)[:400], ok=False))
            continue
        rows.append(dict(record(shape, "fla", direction, r, errs, dtype), rel_err_vs_jaxnorm=vs_jaxnorm,
                         timer=fla_timer.method))
        report(rows[-1], ceiling)
        if vs_jaxnorm is not None:
            print("      vs jaxnorm: " + " ".join(f"{n} {e:.2g}" for n, e in vs_jaxnorm.items()), flush=True)
    return rows


def write(out_dir, out):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "linear_attention.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    by = {}
    for r in out["rows"]:
        by.setdefault(tuple(r["shape"]), {})[(r["impl"], r["direction"])] = r

    def cell(r):
        if r is None:
            return "–"
        if "error" in r:
            return "fails"
        return f"{r['us']:.0f} ({r['tflop_s']:.3g})" + ("" if r["ok"] else " FAIL")

    def ratio(rs, other, direction):
        a, o = rs.get(("jaxnorm", direction), {}), rs.get((other, direction), {})
        return f"{o['us'] / a['us']:.2f}×" if "us" in a and "us" in o else "–"

    with open(os.path.join(out_dir, "linear_attention.md"), "w") as fh:
        fh.write(f"Device: {out['device']}, jax {out['jax']}; jaxnorm and jnp: {out['method']}; fla: "
                 f"{out.get('fla_method') or out.get('fla', 'not run')}. {out['dtype']}, causal, normalize=True, "
                 "q and k positive (elu+1 applied before timing; jaxnorm feature_map=\"identity\", fla scale=1).\n\n"
                 f"Cells: µs (TFLOP/s). FLOPs: {out['flop_count']}\n\n"
                 "Ratios: jaxnorm's TFLOP/s over the other's (= other's time / jaxnorm's; above 1: jaxnorm "
                 "faster).\n\n")
        cols = [f"{i} {d}" for d in DIRECTIONS for i in IMPLS]
        fh.write("| B, H, L, D | GFLOP fwd | " + " | ".join(cols)
                 + " | jaxnorm/fla fwd | jaxnorm/fla fwd+bwd | jaxnorm/jnp fwd | jaxnorm/jnp fwd+bwd |\n|"
                 + "---|" * (2 + len(cols) + 4) + "\n")
        for shape, rs in by.items():
            fh.write(f"| {', '.join(map(str, shape))} | {flops(shape)['fwd'] / 1e9:.1f} | "
                     + " | ".join(cell(rs.get((i, d))) for d in DIRECTIONS for i in IMPLS) + " | "
                     + " | ".join(ratio(rs, o, d) for o in ("fla", "jnp chunked") for d in DIRECTIONS) + " |\n")
        fh.write(f"\nChecks: relative L2 error of out, dq, dk, dv against the float32 chunked form (tolerances "
                 f"{TOL}); the float32 form against the quadratic reference: {out['jnp_form_check']['rel_err']} "
                 f"(ok: {out['jnp_form_check']['ok']}).\n")
        fla_rows = [r for r in out["rows"] if r["impl"] == "fla" and r.get("rel_err_vs_jaxnorm")]
        if fla_rows:
            fh.write("\nfla against jaxnorm on the same inputs (relative L2 error):\n\n")
            for r in fla_rows:
                fh.write(f"- {tuple(r['shape'])} {r['direction']}: "
                         + ", ".join(f"{n} {e:.2g}" for n, e in r["rel_err_vs_jaxnorm"].items()) + "\n")
        errors = [r for r in out["rows"] if "error" in r]
        if errors:
            fh.write("\nErrors:\n\n" + "".join(f"- {tuple(r['shape'])} {r['impl']} {r['direction']}: "
                                               f"`{r['error'][:200]}`\n" for r in errors))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true", help="small shapes only (smoke test)")
    ap.add_argument("--wall", action="store_true", help="wall clock instead of device time (smoke test)")
    ap.add_argument("--fla", action="store_true", help="time flash-linear-attention's chunk_linear_attn too")
    ap.add_argument("--fla-timer", choices=("profiler", "events"), default="profiler")
    ap.add_argument("--reps", type=int, default=5, help="timed passes over the rotated inputs")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--shapes", default=None,
                    help="indices into SHAPES, e.g. 0,1 (one GPU call cannot hold all four with fla)")
    args = ap.parse_args(argv)
    if args.fla:  # leave PyTorch room beside JAX's pool (read when JAX's backend starts, below)
        os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")
    dtype = jnp.dtype(args.dtype)
    timer, ceiling, method = dt.bench_method(args.wall)
    shapes = QUICK if args.quick else SHAPES
    if args.shapes:
        shapes = [shapes[int(i)] for i in args.shapes.split(",")]
    if args.wall:  # CPU smoke test
        shapes = WALL_QUICK if args.quick else [(1, min(h, 4), length // 16, d) for _, h, length, d in shapes[:3]]
    print(f"{method}; copy ceiling {ceiling / 1e12:.2f} TB/s", flush=True)
    out = dict(dt.run_header(method, ceiling), dtype=str(dtype), chunk=CHUNK, tolerances=TOL,
               flop_count="chunked algorithm, chunk 64, per chunk per (batch, head): 2C²Dk (scores) + 2C²Dv (intra) "
                          "+ 2CDkDv (inter) + 2CDkDv (state update), full C×C blocks; fwd+bwd = 3× fwd; "
                          "normalizer and elementwise work not counted",
               rows=[])
    check = check_jnp_form()
    out["jnp_form_check"] = check
    print(f"jnp chunked form (float32) vs quadratic reference {check['shape']}: "
          + " ".join(f"{n} {e:.2g}" for n, e in check["rel_err"].items()) + ("" if check["ok"] else "  CHECK FAILED"),
          flush=True)
    for shape in shapes:  # every JAX profile first: then torch.profiler takes CUPTI once, after them
        b, h, length, d = shape
        print(f"B={b} H={h} L={length} D={d}: {flops(shape)['fwd'] / 1e9:.1f} GFLOP fwd", flush=True)
        out["rows"] += bench_shape_jax(timer, ceiling, shape, dtype, args.reps)
        write(args.out, out)
    if args.fla:
        status = fla_available()
        out["fla"] = status
        print(f"flash-linear-attention: {status}", flush=True)
        if status.startswith("fla "):
            fla_timer = FlaTimer("wall" if args.wall else args.fla_timer)
            jaxnorm_ok = {(tuple(r["shape"]), r["direction"]): "error" not in r
                          for r in out["rows"] if r["impl"] == "jaxnorm"}
            for shape in shapes:
                print(f"fla: B={shape[0]} H={shape[1]} L={shape[2]} D={shape[3]}", flush=True)
                out["rows"] += bench_shape_fla(fla_timer, ceiling, shape, dtype, args.reps, jaxnorm_ok)
                out["fla_method"] = fla_timer.method
                write(args.out, out)
    write(args.out, out)
    bad = [r for r in out["rows"] if not r.get("ok") and (r["impl"] == "jaxnorm" or "error" not in r)]
    n = sum("error" not in r for r in out["rows"])
    ran_bad = sum("error" not in r for r in bad)
    others = sum(r["impl"] != "jaxnorm" and "error" in r for r in out["rows"])
    print(f"{n - ran_bad}/{n} checks passed" + (f"; jaxnorm errors: {len(bad) - ran_bad}" if len(bad) > ran_bad else "")
          + (f"; {others} competitor configs did not run" if others else ""), flush=True)
    return 1 if bad or not check["ok"] else 0


if __name__ == "__main__":
    sys.exit(main())
