"""jaxnorm's and QuACK's row ops in Nsight Compute's device time, cell by cell, from ncu_cells.sh's
CSVs: one method for both libraries, where bench.py's table takes jaxnorm from the JAX profiler
and QuACK from the PyTorch profiler (results/h200-f32-bwd: the two disagreed by ~9% on one cell).

    python benchmarks/ncu_cells.py DIR

DIR/LIB__OP__DIRECTION__RxC__DTYPE__CALLS.csv (DIRECTION fwd or fwdbwd) holds one process's kernels: CALLS calls of the op
(profile_one.py for jaxnorm, quack_once.py for QuACK), caches flushed by ncu before every kernel.
A call's time is the sum of its kernels' gpu__time_duration (the kernels split evenly over the
calls, in launch order); a cell's is the median over its calls. TB/s counts bench.py's bytes
(bench_add_norm.py's for the residual-add norms, profile_one.py's add_layer_norm and add_rms_norm).
"""

from __future__ import annotations

import os
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from device_time import short_kernel_name  # noqa: E402
from flashinfer_ncu import kernels  # noqa: E402
from jaxnorm._timing import min_bytes  # noqa: E402

ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}
NAME = re.compile(r"^(jaxnorm|quack)__([a-z_]+?)__(fwdbwd|fwd)__(\d+)x(\d+)__([a-z0-9]+)__(\d+)\.csv$")


def cell_time(csv_path: Path, calls: int):
    """(median µs a call, kernel names a call, whether the kernels split evenly) of one CSV."""
    ks = kernels(str(csv_path))
    if not ks:
        return None, "", False
    even = len(ks) % calls == 0
    k = len(ks) // calls if even else len(ks)
    per_call = [sum(us for _, us in ks[i:i + k]) for i in range(0, len(ks), k)]
    names = Counter(short_kernel_name(n) for n, _ in ks[:k])
    label = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in names.items())
    return statistics.median(per_call) if even else sum(per_call) / calls, label, even


def cell_bytes(op: str, direction: str, rows: int, cols: int, itemsize: int) -> int:
    if op.startswith("add_"):  # read x and r, write y and h; the backward reads h, dy, dh, writes dx
        return (4 if direction == "fwd" else 8) * rows * cols * itemsize
    return min_bytes(op, direction, rows, cols, itemsize)


def table(directory: str) -> str:
    cells = {}
    for p in sorted(Path(directory).glob("*.csv")):
        m = NAME.search(p.name)
        if m:
            lib, op, direction, rows, cols, dtype, calls = m.groups()
            direction = "fwd+bwd" if direction == "fwdbwd" else direction
            cells.setdefault((dtype, op, direction, int(cols), int(rows)), {})[lib] = cell_time(p, int(calls))
    lines = ["| dtype | op | direction | shape | jaxnorm µs (TB/s) | QuACK µs (TB/s) | jaxnorm / QuACK speed | "
             "jaxnorm kernels | QuACK kernels |", "|---|---|---|---|---|---|---|---|---|"]
    for (dtype, op, direction, cols, rows), libs in sorted(cells.items()):
        nb = cell_bytes(op, direction, rows, cols, ITEMSIZE[dtype])
        row = [dtype, op, direction, f"{rows}x{cols}"]
        times = {}
        for lib in ("jaxnorm", "quack"):
            us, _, even = libs.get(lib, (None, "", False))
            times[lib] = us
            row.append("–" if us is None else f"{us:.1f} ({nb / us / 1e6:.2f}){'' if even else ' uneven'}")
        j, q = times["jaxnorm"], times["quack"]
        row.append(f"{q / j:.3f}" if j and q else "–")
        row += [libs.get(lib, (None, "–", False))[1] or "–" for lib in ("jaxnorm", "quack")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(table(sys.argv[1]))
