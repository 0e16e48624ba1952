#!/usr/bin/env python3
"""jaxnorm benchmark: LayerNorm, RMSNorm, softmax and log-softmax, forward and forward+backward,
bfloat16 and float32, jaxnorm vs the XLA-compiled jax.numpy reference (and tokamax if it
imports), over row widths 128 .. 262144 at 2^27 elements per input plus a few small-batch
shapes where launch latency dominates.

    python benchmarks/bench.py --out DIR            # the full run (about 4-5 min on an H100)
    python benchmarks/bench.py --quick --out /tmp/b # CPU smoke test, well under a minute

Writes DIR/bench.json (every number, environment, method), DIR/bench.md (tables) and
DIR/bench.png (bandwidth vs width; skipped with a message without matplotlib). bench.json is
rewritten after every shape, so a run cut short still leaves what it measured. One failing
configuration (an OOM, a kernel error) is recorded and skipped. The timing method is printed
at the end and stored in the JSON; it lives in jaxnorm/_timing.py, shared with
`python -m jaxnorm`.
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


def run(args) -> dict:
    env = environment()
    impls = T.implementations(include_tokamax=not args.no_tokamax,
                              include_memory_efficient="jaxnorm-me" in args.impls)
    impls = {k: v for k, v in impls.items() if k in args.impls}
    method = T.method_text(args.reps, args.min_time, args.max_time,
                           f"N = {args.inputs}" if args.inputs else "", rounds=args.rounds)
    result = {
        "env": env,
        "args": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(args).items()
                 if k != "func"},
        "method": method,
        "copy": [],
        "results": [],
        "skipped": [],
    }
    print(f"jaxnorm bench: jax {env['jax_version']}, backend {env['backend']}, "
          f"device {env['device_kind']}, commit {env['git_commit']}, cuda_built {env['cuda_built']}, "
          f"impls {list(impls)}", flush=True)
    plan = build_plan(args)
    n_configs = len(plan) * len(args.dtypes) * len(args.ops) * len(args.directions)
    print(f"{n_configs} configurations: dtypes {args.dtypes}, ops {args.ops}, "
          f"directions {args.directions}, shapes {[s for s, _ in plan]}", flush=True)
    ns = sorted({args.inputs or T.n_inputs_for(math.prod(shape) * jax.numpy.dtype(
        T.DTYPES[d]).itemsize) for shape, _ in plan for d in args.dtypes})
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
            n = args.inputs or T.n_inputs_for(elements * itemsize)
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

            copy, _ = T.run_shape(shape, dtype_name, args.ops, args.directions, impls, n=n,
                                  reps=args.reps, min_time=args.min_time,
                                  max_time=args.max_time, seed=args.seed,
                                  copy=copies.get(key), on_result=on_result,
                                  rounds=args.rounds)
            if key not in copies:
                copy["group"] = group
                copies[key] = copy
                result["copy"].append(copy)
                print(f"[{dtype_name}] copy baseline {'x'.join(map(str, shape))} N={n}: "
                      + copy_summary(copy), flush=True)
            gc.collect()
            if args.out:
                write_json(result, args.out)
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


def write_md(result: dict, out: str):
    env = result["env"]
    md = [
        "# jaxnorm benchmark",
        "",
        f"- device: {env['device_kind']} ({env['backend']}), jax {env['jax_version']}, "
        f"jaxlib {env['jaxlib_version']}, jaxnorm {env['jaxnorm_version']}, "
        f"commit {env['git_commit']}, CUDA handlers built: {env['cuda_built']}",
        f"- run: {env['timestamp_utc']}, {result.get('total_s', 0):.0f} s",
        "- fixed cost of one timed call (included in the times, divided by N): " + ", ".join(
            f"N={k}: {T.fmt_time(v) if isinstance(v, float) else v}"
            for k, v in result.get("call_overhead_s", {}).items()),
        "",
        "## Method",
        "",
        result["method"],
        "",
        "## Copy baseline",
        "",
        "| dtype | shape | N | x * s time | x * s TB/s | jnp.copy time | jnp.copy TB/s | "
        "reference |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in result["copy"]:
        row = [c["dtype"], "x".join(map(str, c["shape"])), str(c["n_inputs"])]
        for k in ("mul", "copy"):
            v = c.get("variants", {}).get(k, {})
            row += ([T.fmt_time(v["time_s"]), f"{v['bw_Bps'] / 1e12:.3f}"] if "bw_Bps" in v
                    else ["error", ""])
        row.append(c.get("best", "error"))
        md.append("| " + " | ".join(row) + " |")
    md += ["", "## Summary", "", "```", pivot_tables(result), "```", ""]
    me = memory_efficient_table(result)
    if me:
        md += ["## Memory-efficient mode", "",
               "Norm forward+backward with `memory_efficient=True` (the backward reads y, not x) "
               "against the default, timed in the same run: ratio = memory-efficient time / "
               "default time.", "", me, ""]
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
    styles = {"jaxnorm": "-", "xla": "--", "tokamax": ":"}
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
            copies = [c for c in result["copy"] if c["dtype"] == dtype
                      and c.get("group") == "sweep" and "bw_Bps" in c]
            if copies:
                ax.axhline(copies[0]["bw_Bps"] / 1e12, color="k", linewidth=1, alpha=0.5)
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
    fig.suptitle(f"jaxnorm vs XLA, {result['env']['device_kind']}, "
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
    p.add_argument("--dtypes", help="comma list of bfloat16,float32 (default both)")
    p.add_argument("--directions", help="comma list of fwd,fwd+bwd (default both; 'bwd' = fwd+bwd)")
    p.add_argument("--widths", help="comma list of row widths (default 128..262144)")
    p.add_argument("--elements", type=parse_int, help="elements per input (default 2^27)")
    p.add_argument("--small", help="comma list of RxC small-batch shapes, or 'none' "
                                   f"(default {','.join(f'{r}x{c}' for r, c in SMALL_SHAPES)})")
    p.add_argument("--reps", type=int, help="timed calls per measurement, at least (default 20)")
    p.add_argument("--min-time", type=float, help="keep timing until this many seconds (0.1)")
    p.add_argument("--max-time", type=float, help="stop timing after this many seconds (2)")
    p.add_argument("--rounds", type=int, default=1,
                   help="time the implementations in turn this many times, keep each one's "
                        "best median (default 1)")
    p.add_argument("--inputs", type=int, default=0,
                   help="N distinct inputs per timed call (default 4 for inputs >= 64 MiB, else 8)")
    p.add_argument("--impls", default="jaxnorm,xla,jaxnorm-me,tokamax",
                   help="comma list of implementations to time (default jaxnorm,xla,jaxnorm-me,tokamax; "
                        "jaxnorm-me: the norms in memory-efficient mode, forward+backward only)")
    p.add_argument("--no-tokamax", action="store_true", help="do not try to import tokamax")
    p.add_argument("--budget", type=float, default=360.0,
                   help="seconds after which remaining shapes are skipped and recorded (360; "
                        "the full run takes about 270 on an H100)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

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
        args.reps = args.reps or 3
        args.min_time = 0.0 if args.min_time is None else args.min_time
        args.max_time = 0.2 if args.max_time is None else args.max_time
    else:
        args.widths = widths or WIDTHS
        args.elements = args.elements or (1 << 27)
        args.small = SMALL_SHAPES if small is None else small
        args.reps = args.reps or 20
        args.min_time = 0.1 if args.min_time is None else args.min_time
        args.max_time = 2.0 if args.max_time is None else args.max_time

    t0 = time.perf_counter()
    result = run(args)
    if args.out:
        write_json(result, args.out)
        write_md(result, args.out)
        print(f"wrote {Path(args.out, 'bench.json')} and {Path(args.out, 'bench.md')}")
        print(write_plot(result, args.out))
    errs = errors_list(result)
    print()
    print("Method: " + result["method"])
    print()
    print(pivot_tables(result))
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
