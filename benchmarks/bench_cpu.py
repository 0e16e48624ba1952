#!/usr/bin/env python3
"""CPU speed of jaxnorm's row ops against XLA's CPU code for the same jax.numpy reference
(issue 17): every op x dtype x shape x direction, as same-run ratios.

    python benchmarks/bench_cpu.py --out benchmarks/results/cpu-<commit>.md
    python benchmarks/bench_cpu.py --ops softmax --dtypes float32 --shapes 256x1024 --pairs 9
    python benchmarks/bench_cpu.py --ops softmax_cross_entropy --shapes 64x32000 --out FILE --append
    MALLOC_TRIM_THRESHOLD_=4000000000 MALLOC_MMAP_THRESHOLD_=4000000000 \
        python benchmarks/bench_cpu.py --shapes 256x1024,32x8192 --out FILE --append

On a shared, noisy machine two separately timed medians can differ by 2x from load alone, so
the two implementations are timed in alternating calls (jaxnorm, XLA, jaxnorm, XLA, ...), each
pair gives one ratio XLA time / jaxnorm time, and the table reports the median of those ratios
(> 1: jaxnorm faster). Each call applies the op to N distinct inputs (N * elements >= 2^22, at
most 16) so that its fixed dispatch cost stays small; jaxnorm's outputs for the first input
are checked against XLA's (jaxnorm/_timing.py's tolerances).

At small shapes much of the time can go to the kernel mapping fresh output pages, and how many
pages are fresh depends on the thread that allocated the outputs and on when glibc's malloc hands
freed memory back to the system (its dynamic trim threshold, which a program's large temporaries
raise). XLA runs a program of jaxnorm's custom calls alone inline on the calling thread (its cost
model counts custom calls as cheap), whose heap glibc trims: every call then wrote fresh pages,
2-4x the kernel time at 1 MB. So each timed function also computes a small anchor, the same for
both implementations, that makes XLA run both on its worker threads, as it runs any program with
real work (jaxnorm/_timing.py, _dispatch_anchor; --no-anchor times the programs alone). The
MALLOC_* variables above fix glibc's thresholds for both implementations alike; a run records them
and --no-anchor in its heading.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import jax
import jax.numpy as jnp

try:
    import jaxnorm
except ImportError:  # a source checkout that is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import jaxnorm
import jaxnorm.reference
from jaxnorm import _timing as T

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_families as F  # noqa: E402

SHAPES = [(256, 1024), (8192, 1024), (32, 8192), (64, 65536)]


def n_inputs(rows: int, cols: int) -> int:
    return max(1, min(16, (1 << 22) // (rows * cols)))


def timed(f, args) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(f(*args))
    return time.perf_counter() - t0


CE = "softmax_cross_entropy"  # timed with --ops softmax_cross_entropy (not in the default ops)


def ce_case(shape, dtype: str, n: int):
    """Softmax cross-entropy in the row ops' harness: N logits inputs, one set of random integer
    labels (constants of the program), a random-normal per-row loss cotangent for fwd+bwd."""
    rows, cols = shape
    xs, _, _ = T.make_inputs(0, shape, T.DTYPES[dtype], n, with_dy=False)
    rng = np.random.default_rng(1)
    labels = jnp.asarray(rng.integers(0, cols, rows), jnp.int32)
    dys = tuple(jnp.asarray(rng.standard_normal(rows, np.float32)) for _ in range(n))
    fns = {"jaxnorm": lambda x: jaxnorm.softmax_cross_entropy(x, labels),
           "xla": lambda x: jaxnorm.reference.softmax_cross_entropy(x, labels)}
    return (xs, dys, ()), fns


def family_case(op: str, dtype: str, shape, direction: str):
    """(args, fns, check) of a family op (cpu_families.py); op "sample/top_k=50" names the filter.
    The embedding's "table_grad" times the table gradient alone as a forward step over N douts."""
    name, _, filters = op.partition("/")
    c = F.make_case(name, shape, dtype, filters or None)
    fns = {"jaxnorm": c.jaxnorm, "xla": c.xla}
    args = (c.xs, c.dys if direction == "fwd+bwd" else None, c.params)
    if direction == "table_grad":
        fns = {k: F.table_grad_step(f) for k, f in fns.items()}
        args = (c.dys, None, (c.xs[0],) + c.params)
    return args, fns, c.check


def measure(op: str, dtype: str, shape, direction: str, pairs: int, impls: dict,
            anchor: bool = True) -> dict:
    check_fn = None
    if op.partition("/")[0] in F.SPECS:
        args, fns, check_fn = family_case(op, dtype, shape, direction)
        n = len(args[0])
    elif op == CE:
        n = n_inputs(*shape)
        args, fns = ce_case(shape, dtype, n)
    else:
        n = n_inputs(*shape)
        xs, dys, params = T.make_inputs(0, shape, T.DTYPES[dtype], n)
        args = (xs, dys, params[: T.N_PARAMS[op]])
        fns = {"jaxnorm": impls["jaxnorm"][op], "xla": impls["xla"][op]}
    step_dir = "fwd" if direction == "table_grad" else direction
    jn = T.make_step(fns["jaxnorm"], step_dir, n, anchor=anchor)
    xla = T.make_step(fns["xla"], step_dir, n, anchor=anchor)
    got, want = jn(*args), xla(*args)  # also the compile calls
    check = ({"pass": check_fn(got[0], want[0])} if check_fn else T.compare(got, want, dtype))
    del got, want
    for f in (jn, xla):  # warm-up
        timed(f, args)
    t_jn, t_xla = [], []
    for _ in range(pairs):
        t_jn.append(timed(jn, args))
        t_xla.append(timed(xla, args))
    ratios = [b / a for a, b in zip(t_jn, t_xla)]
    return {"op": op, "dtype": dtype, "shape": shape, "direction": direction, "n": n,
            "jaxnorm_s": statistics.median(t_jn) / n, "xla_s": statistics.median(t_xla) / n,
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "check": check.get("pass")}


def fmt_ms(s: float) -> str:
    return f"{s * 1e3:.3g}"


def shape_str(shape, sep="x") -> str:
    return sep.join(str(v) for v in shape)


def table(recs) -> str:
    lines = ["| op | dtype | shape | dir | N | jaxnorm ms | XLA ms | ratio (median) | min–max | check |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        lines.append(f"| {r['op']} | {r['dtype']} | {shape_str(r['shape'], '×')} | {r['direction']} | "
                     f"{r['n']} | {fmt_ms(r['jaxnorm_s'])} | {fmt_ms(r['xla_s'])} | **{r['ratio']:.2f}** | "
                     f"{r['ratio_min']:.2f}–{r['ratio_max']:.2f} | {'pass' if r['check'] else 'FAIL'} |")
    return "\n".join(lines)


def summary(recs) -> str:
    lines = ["| op | min ratio | median ratio | cells < 1.0 |", "|---|---|---|---|"]
    for op in dict.fromkeys(r["op"] for r in recs):
        rs = [r["ratio"] for r in recs if r["op"] == op]
        lines.append(f"| {op} | {min(rs):.2f} | {statistics.median(rs):.2f} | "
                     f"{sum(x < 1.0 for x in rs)} of {len(rs)} |")
    return "\n".join(lines)


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except Exception:
        return os.environ.get("COMMIT", "unknown")


FAMILIES_TEXT = (
    "Families (--families; cases in benchmarks/cpu_families.py): N distinct primary inputs (logits, "
    "q, ids, the padded batch; N * elements >= 2^22, N <= 16), the other operands shared; XLA side "
    "jaxnorm.reference (sample: its sort-based sampler; filter_logits; decode_attention: the einsum "
    "step; linear_attention: the quadratic masked form; embed_with_position; remove/rebuild_padding: "
    "gathers), top_k against lax.top_k. Logits are 3 x random-normal; sample's check is that every "
    "drawn token lies in reference.sampling_mask (the samplers' random streams differ), top_k's is "
    "exact equality; decode caches filled to random lengths in [L/2, L], no append; embedding "
    "positions 0..L-1 per sequence, table_grad the table's gradient alone for a random-normal dout; "
    "padding lengths uniform in [1, max_len], capacity B * max_len. ")


def method(pairs: int, anchor: bool = True, families: bool = False) -> str:
    anchor_text = (
        "Each jitted function also returns the sum of squares of its first input's first 2048 "
        "elements (about 1 us, the same on both sides), so that XLA runs both programs on its "
        "worker threads as it does any program with real work: a program of jaxnorm's custom calls "
        "alone counts as cheap in XLA's cost model and runs inline on the calling thread, whose "
        "heap glibc trims, so its outputs come back as fresh pages (jaxnorm/_timing.py, "
        "_dispatch_anchor). " if anchor else
        "No anchor computation (--no-anchor): jaxnorm's program, of custom calls alone, runs inline "
        "on the calling thread and XLA's on its worker threads (jaxnorm/_timing.py, "
        "_dispatch_anchor). ")
    return (f"Each cell: jax.jit of the op over N distinct random-normal inputs (N * elements >= 2^22, "
            f"N <= 16; fwd+bwd = jax.vjp and the pullback of a random-normal dy, every gradient "
            f"returned), for jaxnorm and for jaxnorm.reference compiled by XLA. {anchor_text}After compiling and "
            f"one warm-up call each, {pairs} pairs of calls are timed alternately (jaxnorm then XLA, "
            f"wall clock around the call and block_until_ready); ratio = XLA time / jaxnorm time per "
            f"pair, median over the pairs (min–max beside it); the ms columns are median call time / N. "
            f"Norm parameters float32, epsilon 1e-6; softmax over the last axis, no mask; "
            f"softmax_cross_entropy with random integer labels and no options, fwd+bwd its "
            f"gradient with respect to the logits for a random-normal per-row cotangent. "
            f"Check: jaxnorm's outputs for the first input against XLA's (jaxnorm/_timing.py). "
            + (FAMILIES_TEXT if families else ""))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default=",".join(T.OPS), help=f"comma-separated; {CE} too on request")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--shapes", default=",".join(f"{r}x{c}" for r, c in SHAPES))
    p.add_argument("--directions", default=",".join(T.DIRECTIONS))
    p.add_argument("--pairs", type=int, default=15, help="alternating timed pairs per cell (15)")
    p.add_argument("--out", help="write the Markdown result here")
    p.add_argument("--append", action="store_true", help="add this run to --out as a section")
    p.add_argument("--no-anchor", action="store_true",
                   help="time the ops' programs alone (XLA then runs jaxnorm's inline on the calling thread)")
    p.add_argument("--families", help="time these operator families' ops instead of --ops (comma-"
                   f"separated, or 'all': {', '.join(F.SPECS)}; sample and filter_logits once per "
                   f"filter {', '.join(F.FILTERS)}) at their own shapes and directions, unless "
                   "--shapes/--directions are given")
    a = p.parse_args(argv)
    explicit = {k: getattr(a, k) != p.get_default(k) for k in ("shapes", "directions")}

    def parse(shapes):
        return [tuple(int(v) for v in s.split("x")) for s in shapes.split(",")]

    if a.families:
        names = list(F.SPECS) if a.families == "all" else a.families.split(",")
        cells = []
        for name in names:
            shapes, dirs, _ = F.SPECS[name]
            shapes = parse(a.shapes) if explicit["shapes"] else parse(",".join(shapes))
            dirs = a.directions.split(",") if explicit["directions"] else dirs
            ops = [f"{name}/{f}" for f in F.FILTERS] if name in ("sample", "filter_logits") else [name]
            cells += [(op, shapes, dirs) for op in ops]
    else:
        cells = [(op, parse(a.shapes), a.directions.split(",")) for op in a.ops.split(",")]
    impls = T.implementations(include_tokamax=False)
    t0 = time.perf_counter()
    recs = []
    for op, shapes, dirs in cells:
        for dtype in a.dtypes.split(","):
            for shape in shapes:
                for d in dirs:
                    r = measure(op, dtype, shape, d, a.pairs, impls, anchor=not a.no_anchor)
                    recs.append(r)
                    print(f"{op:<20} {dtype:<8} {shape_str(shape):>12} {d:<10} jaxnorm "
                          f"{fmt_ms(r['jaxnorm_s']):>7} ms  XLA {fmt_ms(r['xla_s']):>7} ms  ratio "
                          f"{r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})"
                          f"{'' if r['check'] else '  CHECK FAILED'}", flush=True)
    print("\n" + summary(recs))
    failed = sum(not r["check"] for r in recs)
    if a.out:
        machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                   f"jax {jax.__version__}, {platform.platform()}")
        malloc_env = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("MALLOC_"))
        command = f"{malloc_env + ' ' if malloc_env else ''}python benchmarks/bench_cpu.py {' '.join(sys.argv[1:])}"
        setting = (malloc_env or "the default environment") + (", the ops' programs alone (--no-anchor)"
                                                                if a.no_anchor else "")
        body = (f"{datetime.date.today()}, {machine}; {time.perf_counter() - t0:.0f} s. "
                f"Command: `{command}`.\n\nMethod: {method(a.pairs, not a.no_anchor, bool(a.families))}\n\n"
                f"### Summary (ratio = XLA time / jaxnorm time)\n\n{summary(recs)}\n\n"
                f"### Every cell\n\n{table(recs)}\n")
        if a.append:
            heading = f"\n## Run with {setting}\n\n"
            with open(a.out, "a") as f:
                f.write(heading + body)
        else:
            Path(a.out).write_text(f"# CPU: jaxnorm vs XLA, commit {commit()}\n\n## Run with "
                                   f"{setting}\n\n" + body)
        print(f"wrote {a.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
