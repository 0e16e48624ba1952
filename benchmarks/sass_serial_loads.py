"""Runs of loads that one register carries one after another, in a kernel's SASS: each load writes
the register the previous load's consumer read, so every load waits for that consumer and its
latency is paid in full, once a load (a shared-memory load ~30 cycles, a global one ~500+).

    python benchmarks/sass_serial_loads.py SASS [MIN_RUN]      (MIN_RUN: default 6)
    python benchmarks/sass_serial_loads.py --load-phase SASS [FILTER]

The second form looks across branches: for each kernel (whose demangled name contains FILTER),
the global loads before its first shuffle or barrier (a row kernel's loads, before its
reduction), and how many of them write a register an earlier one of those loads wrote, so that
the earlier value was consumed first and the later load waited for it. Tiles issue every pack's
loads under a branch a pack, which the first form's straight-code runs do not cross; this form
found the masked softmax forward's mask (14 of 24 loads a row in its 256 x 8 tile) and the
residual-add backward's h cotangent (the same register for every pack) each waiting for the
previous pack's (results/next-rows/README.md). It needs c++filt.

SASS is `cuobjdump -sass` of a cubin or an object built with nvcc -arch=sm_90; the development
machine has no cuobjdump, but Triton's wheel carries one (pip install triton; it is under
triton/backends/nvidia/bin/, with nvdisasm, whose `-g` maps an address to its source line).
Prints, longest first: the run's length, the load, its address range and the kernel. Found the
sampler's rank sort (a lane's ~100 compares each waiting out a load: most of the 1.8 µs CTA 0
sorts a batch-1 row, benchmarks/results/h200-stage-x-hist-push); the norm kernels had no run of 3.
"""
import re
import sys

INS = re.compile(r"/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*([^;]*);")
BREAK = ("BRA", "BAR", "EXIT", "RET", "CALL", "BSYNC", "WARPSYNC")  # a run stays in straight code


def regs(text):
    return set(re.findall(r"\bR(\d+)\b", text))


def runs(path, min_run):
    func, prev, run, found = None, None, [], []

    def close(end):
        if len(run) >= min_run:
            found.append((len(run), prev["op"], run[0], end, func))

    for line in open(path):
        if "Function :" in line:
            func, prev, run = line.split("Function :")[1].strip(), None, []
            continue
        m = INS.search(line)
        if not m:
            continue
        addr, _, op, args = m.groups()
        if op.startswith(BREAK):
            if prev:
                close(addr)
            run, prev = [], None
            continue
        if op.startswith(("LDS", "LDG", "LD.")) or op == "LD":
            dst = regs(args.split(",")[0])
            if prev and dst == prev["dst"] and prev["used"]:
                run = run or [prev["addr"]]
                run.append(addr)
            else:
                if prev:
                    close(addr)
                run = []
            prev = {"dst": dst, "used": False, "addr": addr, "op": op}
        elif prev and regs(",".join(args.split(",")[1:]) or args) & prev["dst"]:
            prev["used"] = True
    return sorted(found, key=lambda f: -f[0])


def load_phase(path):
    """(kernel, loads, loads into a register an earlier load of the phase wrote) per kernel."""
    out, func, loads, reused, seen, done = [], None, 0, 0, [], False
    for line in open(path):
        if "Function :" in line:
            if func and loads:
                out.append((func, loads, reused))
            func, loads, reused, seen, done = line.split("Function :")[1].strip(), 0, 0, [], False
            continue
        m = INS.search(line)
        if not m or done:
            continue
        op, args = m.group(3), m.group(4)
        if op.startswith(("SHFL", "BAR", "REDUX")):
            done = True
        elif op.startswith("LDG"):
            first = re.match(r"R(\d+)", args.strip())
            if first:
                lo, width = int(first.group(1)), 4 if ".128" in op else 2 if ".64" in op else 1
                dst = set(range(lo, lo + width))
                reused += any(dst & s for s in seen)
                seen.append(dst)
                loads += 1
    if func and loads:
        out.append((func, loads, reused))
    return out


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--load-phase":
        import subprocess
        found = load_phase(sys.argv[2])
        names = subprocess.run(["c++filt"], input="\n".join(f for f, _, _ in found), capture_output=True,
                               text=True, check=True).stdout.split("\n")
        for (_, loads, reused), name in zip(found, names):
            if reused and (len(sys.argv) < 4 or sys.argv[3] in name):
                print(f"{loads:3d} loads, {reused:3d} into a register reused  {name}")
        sys.exit(0)
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for n, op, a, b, func in runs(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6):
        print(f"{n:3d} {op:9s} 0x{a}-0x{b}  {func}")
