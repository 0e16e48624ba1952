#!/usr/bin/env python3
"""jaxnorm benchmark: LayerNorm, RMSNorm, softmax and log-softmax, forward and forward+backward,
bfloat16 and float32, jaxnorm vs the XLA-compiled jax.numpy reference (and tokamax, and QuACK's
JAX softmax, when they import), over row widths 128 .. 262144 at 2^27 elements per input plus a
few small-batch shapes where launch latency dominates.

    python benchmarks/bench.py --out DIR            # the full run, device time on a GPU
    python benchmarks/bench.py --quick --out /tmp/b # CPU smoke test (wall clock), under a minute
    python benchmarks/bench.py --render DIR/bench.json --quack-json DIR/quack_torch.json --out DIR

Two timers (--timer): `device` (the default on a GPU) sums the GPU kernel durations of each call
from the JAX profiler (benchmarks/device_time.py, the method of the other families' benchmarks)
against the `x + 1` copy ceiling measured the same way; `wall` (the default elsewhere) is the
wall-clock method of jaxnorm/_timing.py, shared with `python -m jaxnorm`. --quack-json adds
QuACK's PyTorch timings (benchmarks/quack_torch.py --ops rows) as the `quack-torch` column;
--render rewrites bench.md/bench.png from an earlier bench.json without timing anything.

Writes DIR/bench.json (every number, environment, method), DIR/bench.md (tables) and
DIR/bench.png (bandwidth vs width; skipped with a message without matplotlib). bench.json and
bench.md are rewritten after every shape, so a run cut short still leaves what it measured. One
failing configuration (an OOM, a kernel error) is recorded and skipped. The timing method is
printed at the end and stored in the JSON.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax

try:
    import jaxnorm
except ImportError:  # run from a source checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import jaxnorm
from jaxnorm import _timing as T

sys.path.insert(0, str(Path(__file__).resolve().parent))
import device_time as dt  # noqa: E402

WIDTHS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144]
SMALL_SHAPES = [(8, 4096), (32, 1024), (64, 16384)]
QUICK_WIDTHS = [128, 4096]
QUICK_SMALL = [(8, 512)]
QUICK_ELEMENTS = 1 << 16


def parse_int(s: str) -> int:
    s = s.strip().replace("**", "^")
    if "^" in s:
        b, e = s.split("^")
        return int(b) ** int(e)
    return int(s)


def parse_list(s: str | None, conv=str):
    if s is None:
        return None
    return [conv(v) for v in s.split(",") if v.strip()]


def parse_shapes(s: str | None):
    if s is None:
        return None
    if s.strip().lower() in ("", "none"):
        return []
    return [tuple(parse_int(d) for d in v.lower().split("x")) for v in s.split(",") if v.strip()]


def git_commit() -> str:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=10)
        if out.returncode != 0:
            return "unknown"
        commit = out.stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10)
        return commit + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")
    except Exception:
        return "unknown"


def environment() -> dict:
    import jaxlib
    from jaxnorm import _ffi

    dev = jax.devices()[0]
    env = {
        "jaxnorm_version": jaxnorm.__version__,
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "backend": jax.default_backend(),
        "device_kind": dev.device_kind,
        "devices": [str(d) for d in jax.devices()],
        "git_commit": (os.environ.get("JAXNORM_COMMIT") or os.environ.get("COMMIT")
                       or git_commit()),
        "cuda_built": _ffi.cuda_built(),
        "tokamax": T.try_import_tokamax() is not None,
        "timestamp_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    try:
        env["cuda_device_summary"] = _ffi.cuda_device_summary()
    except Exception as e:
        env["cuda_device_summary"] = {"error": T._err(e)}
    return env


def memory_stats() -> dict | None:
    try:
        s = jax.devices()[0].memory_stats()
    except Exception:
        return None
    if not s:
        return None
    keep = ("peak_bytes_in_use", "bytes_limit", "bytes_in_use")
    return {k: s[k] for k in keep if k in s}


# ----------------------------------------------------------------------------------------------


def build_plan(args):
    """[(shape, group)]: the width sweep at `elements` per input, then the small-batch shapes."""
    plan = []
    for w in args.widths:
        rows = max(1, args.elements // w)
        plan.append(((rows, w), "sweep"))
    for s in args.small:
        plan.append((tuple(s), "small"))
    return plan


def quack_jax():
    """QuACK's JAX binding as an implementation ({op: fn}) and None, or None and why not. QuACK
    0.6.5 binds softmax only (quack.softmax_jax: a jax.custom_vjp over its TVM-FFI kernels, 2-D
    inputs, the dtypes of quack/jax_utils.py: bfloat16, float16, float32)."""
    try:
        from quack.softmax_jax import softmax  # type: ignore[import-not-found]
    except Exception as e:  # not installed, or broken: never fatal
        return None, T._err(e)
    return {"softmax": softmax}, None


def device_method_text(reps: int, inputs: int) -> str:
    n_desc = (f"N = {inputs}" if inputs else
              "N = 200 MiB / the bytes of one input's x (and dy), clamped to [2, 128]: 2 at 2^27 "
              "elements; device_time.inputs_for")
    return (
        "Timing: device time. Each implementation's forward, or forward+backward, of one input is "
        f"one jax.jit function, called on N distinct random-normal inputs in turn ({n_desc}), so "
        "that no call finds its input in the 50 MB L2; after a compile call and 3 warm-up calls, "
        f"{reps} rounds over the N inputs run under the JAX profiler. A call's time is the sum of "
        "the durations of the GPU kernels it ran (the profiler's CUPTI kernel events; memcpy and "
        "memset excluded; host dispatch and the gaps between kernels are not counted), and the "
        "reported time is the median over the calls (the mean where calls ran different numbers "
        "of kernels): benchmarks/device_time.py, the method of the other benchmarks/. "
        + T.ops_text()
        + "Copy ceiling: y = x + 1 over 2^26 float32 (256 MiB read, 256 MiB written), timed the "
        "same way (device_time.copy_ceiling), one number for the run; '% of copy' = op bandwidth "
        "/ that ceiling. 'quack' is QuACK's JAX softmax binding, timed in this process as above; "
        "'quack-torch' is QuACK's PyTorch kernels, timed by benchmarks/quack_torch.py with "
        "torch.profiler's CUPTI kernel records (the same sum, median and rotation past L2), on "
        "the same byte counts, its '% of copy' against the same x + 1 ceiling measured in torch, "
        "its outputs checked against torch's float32 op and autograd with the tolerances below. "
        + T.check_text()
    )


def device_timer(reps: int):
    """run_config's timer: device_time over one call per input."""
    def timer(step, calls):
        d = dt.device_time(step, calls, reps=reps)
        return {"time_s": d["median"], "kernels_per_call": d["kernels_per_call"],
                "kernels": [dt.short_kernel_name(k) for k in d["kernels"]]}
    return timer


def run(args) -> dict:
    env = environment()
    impls = T.implementations(include_tokamax=not args.no_tokamax,
                              include_memory_efficient="jaxnorm-me" in args.impls)
    if "quack" in args.impls:
        quack, why = quack_jax()
        env["quack_jax"] = why or "imported"
        if quack:
            impls["quack"] = quack
        else:
            print(f"quack (JAX): not timed ({why})", flush=True)
    impls = {k: v for k, v in impls.items() if k in args.impls}
    device = args.timer == "device"
    if device:
        method = device_method_text(args.reps, args.inputs)
    else:
        method = T.method_text(args.reps, args.min_time, args.max_time,
                               f"N = {args.inputs}" if args.inputs else "", rounds=args.rounds)
    result = {
        "env": env,
        "args": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()
                 if k != "func"},
        "timer": args.timer,
        "method": method,
        "copy": [],
        "results": [],
        "skipped": [],
    }
    print(f"jaxnorm bench: jax {env['jax_version']}, backend {env['backend']}, "
          f"device {env['device_kind']}, commit {env['git_commit']}, cuda_built {env['cuda_built']}, "
          f"impls {list(impls)}, timer {args.timer}", flush=True)
    plan = build_plan(args)
    n_configs = len(plan) * len(args.dtypes) * len(args.ops) * len(args.directions)
    print(f"{n_configs} configurations: dtypes {args.dtypes}, ops {args.ops}, "
          f"directions {args.directions}, shapes {[s for s, _ in plan]}", flush=True)
    with_dy = 2 if "fwd+bwd" in args.directions else 1

    def n_inputs(nbytes: int) -> int:
        if args.inputs:
            return args.inputs
        return dt.inputs_for(with_dy * nbytes) if device else T.n_inputs_for(nbytes)

    timer, ceiling = None, None
    if device:
        timer = device_timer(args.reps)
        ceiling = dt.copy_ceiling()
        result["copy_ceiling_Bps"] = ceiling
        print(f"copy ceiling (x + 1, 256 MiB float32, device time): {T.fmt_bw(ceiling)}", flush=True)
    else:
        ns = sorted({n_inputs(math.prod(shape) * jax.numpy.dtype(T.DTYPES[d]).itemsize)
                     for shape, _ in plan for d in args.dtypes})
        result["call_overhead_s"] = {}
        for n in ns:
            try:
                result["call_overhead_s"][str(n)] = T.call_overhead(n)
            except Exception as e:
                result["call_overhead_s"][str(n)] = T._err(e)
        print("fixed cost of one timed call (y = x * s over N tiny inputs): " + ", ".join(
            f"N={k}: {T.fmt_time(v) if isinstance(v, float) else v}"
            for k, v in result["call_overhead_s"].items()), flush=True)
    t_start = time.perf_counter()
    over_budget = False
    for dtype_name in args.dtypes:
        itemsize = jax.numpy.dtype(T.DTYPES[dtype_name]).itemsize
        copies: dict[int, dict] = {}
        for shape, group in plan:
            elements = math.prod(shape)
            n = n_inputs(elements * itemsize)
            if time.perf_counter() - t_start > args.budget:
                over_budget = True
                for op in args.ops:
                    for d in args.directions:
                        result["skipped"].append({"op": op, "direction": d, "dtype": dtype_name,
                                                  "shape": list(shape),
                                                  "reason": f"time budget {args.budget:g}s spent"})
                continue
            key = (elements, n)

            def on_result(rec, group=group):
                rec["group"] = group
                result["results"].append(rec)
                print(progress_line(rec), flush=True)

            known = {"bw_Bps": ceiling} if device else copies.get(key)
            copy, _ = T.run_shape(shape, dtype_name, args.ops, args.directions, impls, n=n,
                                  reps=args.reps, min_time=args.min_time,
                                  max_time=args.max_time, seed=args.seed,
                                  copy=known, on_result=on_result,
                                  rounds=args.rounds, timer=timer)
            if not device and key not in copies:
                copy["group"] = group
                copies[key] = copy
                result["copy"].append(copy)
                print(f"[{dtype_name}] copy baseline {'x'.join(map(str, shape))} N={n}: "
                      + copy_summary(copy), flush=True)
            gc.collect()
            if args.out:
                write_outputs(result, args)
    result["total_s"] = time.perf_counter() - t_start
    result["memory"] = memory_stats()
    if over_budget:
        print(f"time budget of {args.budget:g}s spent: {len(result['skipped'])} configurations "
              "skipped (recorded in the JSON)", flush=True)
    return result


def copy_summary(c: dict) -> str:
    parts = []
    for k, v in c.get("variants", {}).items():
        parts.append(f"{k} " + (f"{T.fmt_time(v['time_s'])}/input {T.fmt_bw(v['bw_Bps'])}"
                                if "bw_Bps" in v else f"ERROR {v.get('error')}"))
    if "best" in c:
        parts.append(f"reference: {c['best']}")
    elif "error" in c:
        parts.append(c["error"])
    return "; ".join(parts)


def progress_line(rec: dict) -> str:
    shape = "x".join(map(str, rec["shape"]))
    head = (f"[{rec['dtype']}] {rec['op']:<11} {rec['direction']:<7} {shape:>13} "
            f"N={rec['n_inputs']}")
    if "error" in rec:
        return head + "  ERROR " + rec["error"]
    parts = []
    for name, r in rec["impls"].items():
        if "error" in r:
            parts.append(f"{name} ERROR {r['error'][:200]}")
            continue
        frac = f" {100 * r['frac_copy']:.0f}%" if r.get("frac_copy") else ""
        parts.append(f"{name} {T.fmt_time(r['time_s'])} {T.fmt_bw(r['bw_Bps'])}{frac} "
                     f"{T.check_mark(r)}")
    sp = f" | x{rec['speedup']:.2f}" if "speedup" in rec else ""
    return head + "  " + " | ".join(parts) + sp


# ----------------------------------------------------------------------------------------------
# Output


def write_json(result: dict, out: str):
    os.makedirs(out, exist_ok=True)
    path = Path(out) / "bench.json"
    tmp = path.with_suffix(".json.tmp")
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1, default=str)
    os.replace(tmp, path)


def write_outputs(result: dict, args, plot: bool = False):
    """bench.json and bench.md (and bench.png), with --quack-json's numbers merged in."""
    if args.quack_json:
        try:
            merge_quack_torch(result, args.quack_json)
        except Exception as e:  # a missing or partial file: say so in the outputs, never fatal
            result["quack_torch"] = {"error": T._err(e)}
    write_json(result, args.out)
    write_md(result, args.out)
    if plot:
        print(write_plot(result, args.out))


def merge_quack_torch(result: dict, paths: list[str]) -> int:
    """Adds QuACK's PyTorch timings (quack_torch.py --ops rows; several files from separate calls
    may split the widths between them, a later file winning a configuration both have) to the
    configurations of the same op, direction, dtype and shape as implementation 'quack-torch':
    its time, TB/s on this benchmark's byte counts, % of the copy ceiling that its quack_torch.py
    run measured in torch, and its own check against torch's float32 op. Returns how many
    configurations got one."""
    found, files = {}, []
    for path in paths:
        with open(path) as f:
            qt = json.load(f)
        files.append({k: qt.get(k) for k in ("device", "torch", "copy_tb_s", "method")} | {"path": str(path)})
        for q in qt["results"]:
            if q["op"] in T.OPS:
                found[q["op"], q["direction"], q["dtype"], q["rows"], q["cols"]] = q, qt["copy_tb_s"] * 1e12
    merged = 0
    for rec in result["results"]:
        rows, cols = math.prod(rec["shape"][:-1]), rec["shape"][-1]
        q, ceiling = found.get((rec["op"], rec["direction"], rec["dtype"], rows, cols), (None, None))
        if q is None:
            continue
        merged += 1
        if "error" in q:
            rec["impls"]["quack-torch"] = {"error": q["error"], "source": "pytorch"}
            continue
        t = q["us"] * 1e-6
        bw = T.min_bytes(rec["op"], rec["direction"], rows, cols,
                         jax.numpy.dtype(T.DTYPES[rec["dtype"]]).itemsize) / t
        rec["impls"]["quack-torch"] = {
            "time_s": t, "bw_Bps": bw, "frac_copy": bw / ceiling, "source": "pytorch",
            "check": {"pass": q["ok"], "worst_ratio": q.get("worst_ratio"),
                      "detail": "against torch's float32 op, in quack_torch.py"}}
    result["quack_torch"] = {"files": files, "merged": merged}
    return merged


def quack_of(rec: dict) -> tuple[str, dict] | None:
    """The QuACK timing a configuration is compared with: its JAX binding, timed in this process,
    where there is one; else its PyTorch kernels."""
    for name, mark in (("quack", "J"), ("quack-torch", "T")):
        r = rec["impls"].get(name, {})
        if "bw_Bps" in r:
            return mark, r
    return None


def width_table(result: dict) -> str:
    """The width sweep: TB/s of jaxnorm, QuACK and XLA beside the copy ceiling, per dtype, op,
    direction and width (QuACK: J = its JAX binding, T = its PyTorch kernels)."""
    lines = ["| dtype | op | direction | width | jaxnorm TB/s | QuACK TB/s | XLA TB/s | copy TB/s | "
             "jaxnorm / QuACK | jaxnorm / XLA |", "|---|---|---|---|---|---|---|---|---|---|"]
    recs = [r for r in result["results"] if r.get("group") == "sweep"]
    key = {d: i for i, d in enumerate(result["args"]["dtypes"])}
    recs.sort(key=lambda r: (key.get(r["dtype"], 99), T.OPS.index(r["op"]),
                             T.DIRECTIONS.index(r["direction"]), r["shape"][-1]))

    def tb(r):
        if "bw_Bps" not in r:
            return ""
        return f"{r['bw_Bps'] / 1e12:.2f}" + ("!" if r.get("check", {}).get("pass") is False else "")

    def ratio(a, b):
        return f"{a['bw_Bps'] / b['bw_Bps']:.2f}" if "bw_Bps" in a and "bw_Bps" in b else ""

    for rec in recs:
        jn, xla = rec["impls"].get("jaxnorm", {}), rec["impls"].get("xla", {})
        q = quack_of(rec)
        lines.append(
            f"| {rec['dtype']} | {rec['op']} | {rec['direction']} | {rec['shape'][-1]} | {tb(jn)} | "
            + (f"{tb(q[1])} ({q[0]}) | " if q else " | ") + f"{tb(xla)} | "
            + (f"{rec['copy_bw_Bps'] / 1e12:.2f}" if rec.get("copy_bw_Bps") else "") + " | "
            + (ratio(jn, q[1]) if q else "") + f" | {ratio(jn, xla)} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def full_table(result: dict) -> str:
    impl_names = []
    for rec in result["results"]:
        for k in rec["impls"]:
            if k not in impl_names:
                impl_names.append(k)
    head = ["dtype", "op", "dir", "shape", "N"]
    for k in impl_names:
        head += [f"{k} time", f"{k} TB/s", f"{k} % copy"]
        if k != "xla":
            head.append(f"{k} check")
    head += ["speedup (xla/jaxnorm)", "copy TB/s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rec in result["results"]:
        row = [rec["dtype"], rec["op"], rec["direction"], "x".join(map(str, rec["shape"])),
               str(rec["n_inputs"])]
        for k in impl_names:
            r = rec["impls"].get(k)
            if r is None or "error" in r:
                err = "" if r is None else "error"
                row += [err, "", ""] + ([""] if k != "xla" else [])
                continue
            row += [T.fmt_time(r["time_s"]), f"{r['bw_Bps'] / 1e12:.3f}",
                    f"{100 * r['frac_copy']:.1f}" if r.get("frac_copy") else "-"]
            if k != "xla":
                c = r.get("check", {})
                row.append(T.check_mark(r) + (f" ({c['worst_ratio']:.2g})"
                                              if isinstance(c.get("worst_ratio"), float) else ""))
        row.append(f"{rec['speedup']:.2f}" if "speedup" in rec else "-")
        row.append(f"{rec['copy_bw_Bps'] / 1e12:.3f}" if rec.get("copy_bw_Bps") else "-")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def errors_list(result: dict) -> list[str]:
    out = []
    for rec in result["results"]:
        tag = f"{rec['dtype']} {rec['op']} {rec['direction']} {'x'.join(map(str, rec['shape']))}"
        if "error" in rec:
            out.append(f"{tag}: {rec['error']}")
        for k, r in rec["impls"].items():
            if "error" in r:
                out.append(f"{tag} [{k}]: {r['error']}")
            elif r.get("check", {}).get("pass") is False:
                out.append(f"{tag} [{k}]: CHECK FAILED {r['check']}")
    for c in result["copy"]:
        if "error" in c:
            out.append(f"copy {c['dtype']} {c['shape']}: {c['error']}")
    return out


def pivot_tables(result: dict) -> str:
    """Compact: per dtype, rows = shape, columns = op/direction, cells = speedup and jaxnorm's
    % of copy (a '!' marks a failed check or an error)."""
    lines = []
    ops = result["args"]["ops"]
    dirs = result["args"]["directions"]
    abbrev = {"layer_norm": "LN", "rms_norm": "RMS", "softmax": "SM", "log_softmax": "LSM"}
    cols = [(o, d) for o in ops for d in dirs]
    for dtype in result["args"]["dtypes"]:
        recs = {(r["op"], r["direction"], tuple(r["shape"])): r for r in result["results"]
                if r["dtype"] == dtype}
        shapes = []
        for r in result["results"]:
            if r["dtype"] == dtype and tuple(r["shape"]) not in shapes:
                shapes.append(tuple(r["shape"]))
        if not shapes:
            continue
        hdr = [f"{abbrev.get(o, o)}{'' if d == 'fwd' else '+b'}" for o, d in cols]
        lines.append(f"{dtype}: speedup vs XLA (x) / jaxnorm % of copy bandwidth "
                     "(! = failed check or error)")
        lines.append(f"{'shape':>12} " + " ".join(f"{h:>10}" for h in hdr))
        for s in shapes:
            cells = []
            for o, d in cols:
                r = recs.get((o, d, s))
                if r is None:
                    cells.append(f"{'':>10}")
                    continue
                jn = r["impls"].get("jaxnorm", {})
                bad = "error" in r or "error" in jn or jn.get("check", {}).get("pass") is False
                sp = f"{r['speedup']:.2f}" if "speedup" in r else "-"
                fr = f"{100 * jn['frac_copy']:.0f}" if jn.get("frac_copy") else "-"
                cells.append(f"{sp + '/' + fr + ('!' if bad else ''):>10}")
            lines.append(f"{'x'.join(map(str, s)):>12} " + " ".join(cells))
        lines.append("")
    return "\n".join(lines)


def memory_efficient_table(result: dict) -> str:
    """Norm forward+backward in memory-efficient mode against the default, same run."""
    lines = ["| dtype | op | shape | default time | memory-efficient time | ratio |",
             "|---|---|---|---|---|---|"]
    for rec in result["results"]:
        a, b = rec["impls"].get("jaxnorm", {}), rec["impls"].get("jaxnorm-me", {})
        if rec["direction"] != "fwd+bwd" or "time_s" not in a or "time_s" not in b:
            continue
        lines.append(f"| {rec['dtype']} | {rec['op']} | {'x'.join(map(str, rec['shape']))} | "
                     f"{T.fmt_time(a['time_s'])} | {T.fmt_time(b['time_s'])} | "
                     f"{b['time_s'] / a['time_s']:.3f} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def section(title: str, table: str, intro: str) -> list[str]:
    """A bench.md section's lines; none for an empty table."""
    return [f"## {title}", "", intro, "", table, ""] if table else []


def write_md(result: dict, out: str):
    env = result["env"]
    md = [
        "# jaxnorm benchmark",
        "",
        f"- device: {env['device_kind']} ({env['backend']}), jax {env['jax_version']}, "
        f"jaxlib {env['jaxlib_version']}, jaxnorm {env['jaxnorm_version']}, "
        f"commit {env['git_commit']}, CUDA handlers built: {env['cuda_built']}",
        f"- run: {env['timestamp_utc']}, {result.get('total_s', 0):.0f} s, timer: "
        f"{result.get('timer', 'wall')}",
    ]
    if "call_overhead_s" in result:
        md.append("- fixed cost of one timed call (included in the times, divided by N): " + ", ".join(
            f"N={k}: {T.fmt_time(v) if isinstance(v, float) else v}"
            for k, v in result["call_overhead_s"].items()))
    md += ["", "## Method", "", result["method"], ""]
    qt = result.get("quack_torch")
    if qt:
        md += ["QuACK in PyTorch (`quack-torch`): " + (
            f"not merged: {qt['error']}" if "error" in qt else
            f"{qt['merged']} configurations from " + "; ".join(
                f"{f['path']} ({f['device']}, torch {f['torch']}; {f['method']}; copy ceiling in "
                f"torch {f['copy_tb_s']:.2f} TB/s)" for f in qt["files"])), ""]
    if result.get("copy_ceiling_Bps"):
        md += ["## Copy ceiling", "", f"y = x + 1 over 256 MiB of float32, device time: "
               f"{result['copy_ceiling_Bps'] / 1e12:.3f} TB/s", ""]
    md += section("TB/s by width", width_table(result),
                  "The width sweep in effective TB/s (fewest bytes); QuACK: (J) its JAX binding "
                  "timed in this run, (T) its PyTorch kernels from quack_torch.py; jaxnorm / X is "
                  "the ratio of TB/s (> 1: jaxnorm faster); ! = failed check.")
    if result["copy"]:
        md += ["## Copy baseline", "",
               "| dtype | shape | N | x * s time | x * s TB/s | jnp.copy time | jnp.copy TB/s | "
               "reference |", "|---|---|---|---|---|---|---|---|"]
    for c in result["copy"]:
        row = [c["dtype"], "x".join(map(str, c["shape"])), str(c["n_inputs"])]
        for k in ("mul", "copy"):
            v = c.get("variants", {}).get(k, {})
            row += ([T.fmt_time(v["time_s"]), f"{v['bw_Bps'] / 1e12:.3f}"] if "bw_Bps" in v
                    else ["error", ""])
        row.append(c.get("best", "error"))
        md.append("| " + " | ".join(row) + " |")
    md += ["", "## Summary", "", "```", pivot_tables(result), "```", ""]
    md += section("Memory-efficient mode", memory_efficient_table(result),
                  "Norm forward+backward with `memory_efficient=True` (the backward reads y, not x) "
                  "against the default, timed in the same run: ratio = memory-efficient time / "
                  "default time.")
    md += ["## All configurations", "", full_table(result), ""]
    errs = errors_list(result)
    if errs:
        md += ["## Errors and failed checks", ""] + [f"- {e}" for e in errs] + [""]
    if result["skipped"]:
        md += ["## Skipped", ""] + [
            f"- {s['dtype']} {s['op']} {s['direction']} {'x'.join(map(str, s['shape']))}: "
            f"{s['reason']}" for s in result["skipped"]] + [""]
    Path(out, "bench.md").write_text("\n".join(md))


def write_plot(result: dict, out: str) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        return f"plot skipped: matplotlib not available ({type(e).__name__}: {e})"
    from matplotlib.lines import Line2D

    dtypes = result["args"]["dtypes"]
    dirs = result["args"]["directions"]
    fig, axes = plt.subplots(len(dirs), len(dtypes), figsize=(7 * len(dtypes), 4.5 * len(dirs)),
                             squeeze=False)
    colors = {"layer_norm": "C0", "rms_norm": "C1", "softmax": "C2", "log_softmax": "C3"}
    styles = {"jaxnorm": "-", "xla": "--", "tokamax": ":", "quack": (0, (5, 1, 1, 1)),
              "quack-torch": (0, (1, 1))}
    impl_seen, op_seen = [], []
    for i, d in enumerate(dirs):
        for j, dtype in enumerate(dtypes):
            ax = axes[i][j]
            recs = [r for r in result["results"] if r["dtype"] == dtype
                    and r["direction"] == d and r.get("group") == "sweep"]
            lines = {}
            for r in recs:
                for name, ir in r["impls"].items():
                    if "bw_Bps" in ir:
                        lines.setdefault((name, r["op"]), []).append(
                            (r["cols"], ir["bw_Bps"] / 1e12))
            for (name, op), pts in sorted(lines.items()):
                pts.sort()
                ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle=styles.get(name, "-."),
                        marker="o" if name == "jaxnorm" else ".", color=colors.get(op, "k"),
                        markersize=4, linewidth=1.5 if name == "jaxnorm" else 1.0)
                impl_seen += [name] if name not in impl_seen else []
                op_seen += [op] if op not in op_seen else []
            copies = [c["bw_Bps"] for c in result["copy"] if c["dtype"] == dtype
                      and c.get("group") == "sweep" and "bw_Bps" in c]
            copies += [result["copy_ceiling_Bps"]] if result.get("copy_ceiling_Bps") else []
            if copies:
                ax.axhline(copies[0] / 1e12, color="k", linewidth=1, alpha=0.5)
            ax.set_xscale("log", base=2)
            ax.set_ylim(bottom=0)
            ax.set_xlabel("row width (elements)")
            ax.set_ylabel("effective bandwidth (TB/s)")
            ax.set_title(f"{d}, {dtype}, {result['args']['elements']} elements/input")
            ax.grid(True, alpha=0.3)
    handles = [Line2D([], [], color=colors.get(o, "k"), label=o) for o in op_seen]
    handles += [Line2D([], [], color="k", linestyle=styles.get(n, "-."), label=n)
                for n in impl_seen]
    handles.append(Line2D([], [], color="k", alpha=0.5, label="copy baseline"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4 * len(dtypes)),
               fontsize=9)
    fig.suptitle(f"jaxnorm vs XLA, {result['env']['device_kind']}, {result.get('timer', 'wall')} time, "
                 f"commit {result['env']['git_commit'][:12]}")
    fig.tight_layout(rect=(0, 0.07, 1, 0.97))
    path = Path(out, "bench.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot written: {path}"


# ----------------------------------------------------------------------------------------------


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="directory for bench.json, bench.md, bench.png")
    p.add_argument("--quick", action="store_true",
                   help=f"CPU smoke test: widths {QUICK_WIDTHS}, {QUICK_ELEMENTS} elements, "
                        f"small shape {QUICK_SMALL}, 3 reps")
    p.add_argument("--ops", help=f"comma list of {','.join(T.OPS)} (default all)")
    p.add_argument("--dtypes", help="comma list of bfloat16,float32,float16 (default "
                                    "bfloat16,float32)")
    p.add_argument("--directions", help="comma list of fwd,fwd+bwd (default both; 'bwd' = fwd+bwd)")
    p.add_argument("--widths", help="comma list of row widths (default 128..262144)")
    p.add_argument("--elements", type=parse_int, help="elements per input (default 2^27)")
    p.add_argument("--small", help="comma list of RxC small-batch shapes, or 'none' "
                                   f"(default {','.join(f'{r}x{c}' for r, c in SMALL_SHAPES)})")
    p.add_argument("--timer", choices=("device", "wall"),
                   help="device: summed GPU kernel durations from the JAX profiler (the default "
                        "on a GPU); wall: wall clock (the default elsewhere)")
    p.add_argument("--reps", type=int, help="device timer: rounds over the N inputs (default 5); "
                                            "wall: timed calls per measurement, at least (20)")
    p.add_argument("--min-time", type=float, help="keep timing until this many seconds (0.1)")
    p.add_argument("--max-time", type=float, help="stop timing after this many seconds (2)")
    p.add_argument("--rounds", type=int, default=1,
                   help="time the implementations in turn this many times, keep each one's "
                        "best median (default 1)")
    p.add_argument("--inputs", type=int, default=0,
                   help="N distinct inputs per timed call (default 4 for inputs >= 64 MiB, else 8)")
    p.add_argument("--impls", default="jaxnorm,xla,jaxnorm-me,tokamax,quack",
                   help="comma list of implementations to time (default jaxnorm,xla,jaxnorm-me,"
                        "tokamax,quack; jaxnorm-me: the norms in memory-efficient mode, "
                        "forward+backward only; quack: QuACK's JAX softmax, when it imports)")
    p.add_argument("--no-tokamax", action="store_true", help="do not try to import tokamax")
    p.add_argument("--budget", type=float, default=360.0,
                   help="seconds after which remaining shapes are skipped and recorded (360; "
                        "the full run takes about 270 on an H100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quack-json", nargs="+", metavar="FILE",
                   help="quack_torch.json files (quack_torch.py --ops rows): QuACK's PyTorch "
                        "timings, shown as the quack-torch column")
    p.add_argument("--render", metavar="BENCH_JSON",
                   help="time nothing: rewrite bench.json/md/png from this earlier bench.json "
                        "(with --quack-json merged) into --out (default: its directory)")
    args = p.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            result = json.load(f)
        args.out = args.out or str(Path(args.render).parent)
        write_outputs(result, args, plot=True)
        print(width_table(result))
        print(f"rendered {args.render} into {args.out}"
              + ("" if "quack_torch" not in result else
                 f"; quack-torch: {result['quack_torch'].get('error') or result['quack_torch']['merged']}"
                 + ("" if "error" in result["quack_torch"] else " configurations merged")))
        return 0
    backend = jax.default_backend()
    if args.timer is None:
        args.timer = "device" if backend == "gpu" else "wall"
    elif args.timer == "device" and backend != "gpu":
        p.error(f"--timer device sums GPU kernel durations from the JAX profiler's device events; "
                f"the {backend} backend has none. Use --timer wall (or run on a GPU).")

    args.ops = parse_list(args.ops) or list(T.OPS)
    args.dtypes = parse_list(args.dtypes) or ["bfloat16", "float32"]
    dirs = parse_list(args.directions) or list(T.DIRECTIONS)
    args.directions = ["fwd+bwd" if d in ("bwd", "fwdbwd", "fwd+bwd") else d for d in dirs]
    args.impls = parse_list(args.impls)
    for o in args.ops:
        if o not in T.OPS:
            p.error(f"unknown op {o!r}; choose from {T.OPS}")
    for d in args.dtypes:
        if d not in T.DTYPES:
            p.error(f"unknown dtype {d!r}; choose from {list(T.DTYPES)}")
    for d in args.directions:
        if d not in T.DIRECTIONS:
            p.error(f"unknown direction {d!r}")
    widths = parse_list(args.widths, parse_int)
    small = parse_shapes(args.small)
    if args.quick:
        args.widths = widths or QUICK_WIDTHS
        args.elements = args.elements or QUICK_ELEMENTS
        args.small = QUICK_SMALL if small is None else small
        args.reps = args.reps or (3 if args.timer == "wall" else 5)
        args.min_time = 0.0 if args.min_time is None else args.min_time
        args.max_time = 0.2 if args.max_time is None else args.max_time
    else:
        args.widths = widths or WIDTHS
        args.elements = args.elements or (1 << 27)
        args.small = SMALL_SHAPES if small is None else small
        args.reps = args.reps or (20 if args.timer == "wall" else 5)
        args.min_time = 0.1 if args.min_time is None else args.min_time
        args.max_time = 2.0 if args.max_time is None else args.max_time

    t0 = time.perf_counter()
    result = run(args)
    if args.out:
        write_outputs(result, args, plot=True)
        print(f"wrote {Path(args.out, 'bench.json')} and {Path(args.out, 'bench.md')}")
    errs = errors_list(result)
    print()
    print("Method: " + result["method"])
    print()
    print(pivot_tables(result))
    if args.timer == "device":
        print(width_table(result) + "\n")
    me = memory_efficient_table(result)
    if me:
        print("memory-efficient mode (norm fwd+bwd; ratio = memory-efficient / default time):")
        print(me)
        print()
    n_ok = sum(1 for r in result["results"]
               if r["impls"].get("jaxnorm", {}).get("check", {}).get("pass") is True)
    print(f"{len(result['results'])} configurations in {time.perf_counter() - t0:.0f} s; "
          f"jaxnorm checks passed: {n_ok}; errors or failed checks: {len(errs)}; "
          f"skipped: {len(result['skipped'])}")
    for e in errs[:20]:
        print("  " + e[:300])
    if len(errs) > 20:
        print(f"  ... {len(errs) - 20} more in bench.json")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
