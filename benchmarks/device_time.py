"""Device time of jitted JAX calls, from the JAX profiler's device events (CUPTI kernel records).

Wall-clock timing of a jitted call includes host dispatch and hides 10-20% differences; this sums
the durations of the kernels the calls ran on the GPU, so jaxnorm, XLA and any other JAX-callable
implementation are measured the same way. Inputs rotate over distinct buffers whose total exceeds
L2, so no call finds its input in cache.
"""

from __future__ import annotations

import statistics
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
from jax._src.lib import _profiler

L2_FLUSH_BYTES = 200 << 20  # rotate inputs over at least this much memory (H100/H200 L2: 50-60 MB)


def inputs_for(nbytes: int, lo: int = 2, hi: int = 128) -> int:
    """How many distinct inputs of `nbytes` to rotate so that they do not fit in L2 together."""
    return max(lo, min(hi, -(-L2_FLUSH_BYTES // max(nbytes, 1))))


def _kernel_events(xspace: bytes) -> list[tuple[int, int, str]]:
    data = jax.profiler.ProfileData.from_serialized_xspace(xspace)
    out = []
    for plane in data.planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        for line in plane.lines:
            if not line.name.startswith("Stream"):
                continue
            for ev in line.events:
                if ev.name.lower().startswith(("memcpy", "memset")):
                    continue
                out.append((ev.start_ns, ev.duration_ns, ev.name))
    return sorted(out)


def device_time(f: Callable, args: Sequence[tuple], *, reps: int = 5) -> dict:
    """Runs f(*a) for every a in args, `reps` times, under the profiler. Returns the device time
    per call (seconds: the sum of kernel durations over all calls / calls, and the median of
    per-call sums when every call ran the same number of kernels), the kernels per call and the
    names of one call's kernels, and each kernel's time per call (`by_kernel`, seconds, by name)."""
    jax.block_until_ready(f(*args[0]))  # compile and warm up outside the trace
    jax.block_until_ready([f(*a) for a in args[: min(len(args), 3)]])
    session = _profiler.ProfilerSession(_profiler.ProfileOptions())
    outs = []
    for _ in range(reps):
        for a in args:
            outs.append(f(*a))
    jax.block_until_ready(outs)
    events = _kernel_events(session.stop())
    calls = reps * len(args)
    if not events:
        raise RuntimeError("the profiler recorded no GPU kernel (not a GPU backend?)")
    total = sum(d for _, d, _ in events) * 1e-9
    per_call = len(events) // calls
    median = total / calls
    if per_call * calls == len(events):
        sums = [sum(d for _, d, _ in events[i * per_call:(i + 1) * per_call]) * 1e-9 for i in range(calls)]
        median = statistics.median(sums)
    by_kernel: dict[str, float] = {}
    for _, d, n in events:
        by_kernel[n] = by_kernel.get(n, 0.0) + d * 1e-9 / calls
    return {"mean": total / calls, "median": median, "kernels_per_call": len(events) / calls,
            "kernels": sorted({n for _, _, n in events[: max(per_call, 1)]}), "by_kernel": by_kernel}


def short_kernel_name(kernel_name: str) -> str:
    """A kernel's name without its template arguments and namespaces, cut to 40 characters."""
    base = kernel_name.split("(")[0].split("<")[0]
    return base.split("::")[-1][:40]


def copy_ceiling() -> float:
    """Bytes/s of `x + 1` over 256 MiB of float32 (bytes read + written), in device time: the
    ceiling every memory-bound kernel is held to, measured the same way as the kernels."""
    n = 1 << 26
    xs = [(jnp.full((n,), float(i), jnp.float32),) for i in range(2)]
    t = device_time(jax.jit(lambda x: x + 1), xs, reps=5)["median"]
    return 2 * n * 4 / t


def wall_time(f: Callable, args: Sequence[tuple], *, reps: int = 5) -> dict:
    """The same measurement in wall clock (host overhead included), for machines without a GPU
    profiler: a smoke test of a benchmark, never a number to compare with device time."""
    import time

    jax.block_until_ready(f(*args[0]))
    times = []
    for _ in range(reps):
        for a in args:
            t0 = time.perf_counter()
            jax.block_until_ready(f(*a))
            times.append(time.perf_counter() - t0)
    return {"mean": sum(times) / len(times), "median": statistics.median(times), "kernels_per_call": None,
            "kernels": []}


def bench_method(wall: bool) -> tuple[Callable, float, str]:
    """What every benchmark times with: (timer, copy ceiling in bytes/s, the method's text). Wall
    clock is a smoke test for machines without a GPU profiler (no ceiling: NaN)."""
    if wall:
        return wall_time, float("nan"), "wall clock (smoke test, host overhead included)"
    return (device_time, copy_ceiling(),
            "device time: JAX profiler kernel events, median over calls, inputs rotated past L2")


def run_header(method: str, ceiling: float) -> dict:
    """The fields every benchmark's JSON starts with."""
    return dict(device=str(jax.devices()[0].device_kind), jax=jax.__version__, method=method,
                copy_tb_s=ceiling / 1e12)


def add_speedups(records: list[dict], times: dict, base: str, prefix: str) -> None:
    """Sets each record's `<base>_speedup` (its implementation's time over `base`'s, same
    direction; None for `base` itself; `times` keyed by (impl, direction)) and prints a line per
    record after `prefix`."""
    for rec in records:
        mine = times[base, rec["direction"]]
        sp = None if rec["impl"] == base else times[rec["impl"], rec["direction"]] / mine
        rec[f"{base}_speedup"] = sp
        print(f"{prefix} {rec['direction']:8s} {rec['impl']:8s} {rec['us']:9.1f} us {rec['tb_s']:6.2f} TB/s"
              + (f"  {base} speedup {sp:5.2f}x" if sp else "") + ("" if rec["ok"] else "  CHECK FAILED"), flush=True)


def checks_passed(records: list[dict]) -> int:
    """Prints how many records' correctness checks passed; the exit status (1 if any failed)."""
    bad = [r for r in records if not r["ok"]]
    print(f"{len(records) - len(bad)}/{len(records)} checks passed")
    return 1 if bad else 0
