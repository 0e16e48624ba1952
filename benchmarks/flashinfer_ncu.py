"""Device time of each FlashInfer anchor entry from Nsight Compute's CSV.

    python benchmarks/flashinfer_ncu.py FIS_STDOUT NCU_CSV

The anchor (anchors/flashinfer_sampling.cu) launches `fis_marker` before and after each entry and
prints one `ENTRY` line per entry, in the same order; an entry's kernels are those between its two
markers (the next shape's set-up, curand and a warm-up softmax, falls outside). Each entry ran
1 + FIS_REPS calls (the count is in the anchor's first line); the table gives the mean over those
calls of the summed `gpu__time_duration` (caches flushed by Nsight Compute before every kernel),
and each kernel's name with its count per call.
"""

from __future__ import annotations

import csv
import re
import sys
from collections import OrderedDict


def entries(stdout_path):
    names, calls = [], None
    for line in open(stdout_path):
        m = re.search(r"calls per entry: (\d+)", line)
        if m:
            calls = int(m.group(1)) + 1
        m = re.search(r"ENTRY (B=\d+ V=\d+) \| (.*?)\s+[\d.]+ us", line)
        if m:
            names.append(f"{m.group(1)} {m.group(2)}")
    return names, calls


def kernels(csv_path):
    rows = []
    with open(csv_path) as f:
        lines = [ln for ln in f if ln.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[unit]
        rows.append((r["Kernel Name"], value * scale))
    return rows


def main(stdout_path, csv_path):
    names, calls = entries(stdout_path)
    rows = kernels(csv_path)
    groups, cur = [], None
    for name, us in rows:
        if "fis_marker" in name:  # markers alternate: an entry's opening, then its closing one
            cur = [] if cur is None else None
            if cur is not None:
                groups.append(cur)
        elif cur is not None:
            cur.append((name, us))
    if len(groups) != len(names) or not calls:
        sys.exit(f"flashinfer_ncu: {len(groups)} entries marked in the profile, {len(names)} printed")
    print(f"| entry | device µs per call (Nsight Compute, mean of {calls}) | kernels per call |")
    print("|---|---|---|")
    for name, group in zip(names, groups):
        per = OrderedDict()
        for k, us in group:
            short = re.sub(r"<.*", "", k).split("(")[0].split("::")[-1]
            per[short] = per.get(short, 0) + 1
        total = sum(us for _, us in group) / calls
        ks = ", ".join(f"{k} ×{n / calls:g}" for k, n in per.items())
        print(f"| {name} | {total:.1f} | {ks} |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
