"""Timing, byte counting and output checking shared by ``python -m jaxnorm`` and
``benchmarks/bench.py``: one method, so both report numbers measured the same way.

Not a public API. Everything here runs on whatever backend JAX picked (CPU or GPU).
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from functools import partial
from typing import Callable, Sequence

import numpy as np

import jax
import jax.numpy as jnp

OPS = ("layer_norm", "rms_norm", "softmax", "log_softmax")
DIRECTIONS = ("fwd", "fwd+bwd")
DTYPES = {"bfloat16": jnp.bfloat16, "float32": jnp.float32, "float16": jnp.float16}
SHORT_DTYPE = {"bfloat16": "bf16", "float32": "f32", "float16": "f16"}

# How many float32 (C,) parameters each op takes (scale, bias).
N_PARAMS = {"layer_norm": 2, "rms_norm": 1, "softmax": 0, "log_softmax": 0}

# Output check: pass when max |a - b| / (ATOL * max|ref| + RTOL * |ref|) <= 1.
CHECK_TOL = {"float32": (2e-4, 2e-4), "bfloat16": (1e-2, 1e-2), "float16": (2e-3, 2e-3)}

EPSILON = 1e-6
INPUT_SET_BYTES = 2 << 30  # N * (one input's bytes) is kept at about this, N in [4, 16]


def n_inputs_for(nbytes: int) -> int:
    """N distinct inputs per timed call: N * nbytes ~ 2 GiB, N in [4, 16]. Enough to run
    kernels back to back with no host work between them, to spread each call's fixed host cost
    (dispatch + sync, ~0.1 ms) over more work, and at the benchmark's sizes far more data than
    the 50 MB L2; few enough that x, dy, y and dx of all N (8 GiB) stay well under 20 GB.
    At 2^27 elements: N = 4 for float32, 8 for bfloat16."""
    return max(4, min(16, INPUT_SET_BYTES // max(nbytes, 1)))


def call_overhead(n: int, reps: int = 50) -> float:
    """Median wall time of the timing wrapper (y = x * s over N tiny inputs): the fixed host
    cost (dispatch + block_until_ready) included once in every timed call."""
    xs = tuple(jnp.full((8, 128), i, jnp.float32) for i in range(n))
    t = time_call(make_copy(n), (xs, jnp.float32(1.0)), reps=reps)
    return t["median_s"]


def method_text(reps: int, min_time: float, max_time: float, n_inputs: str = "",
                rounds: int = 1, backend: str = "gpu") -> str:
    """The timing method in words; `backend` "cpu" describes the CPU table (its sizes, the
    dispatch anchor) instead of the GPU one."""
    cpu = backend == "cpu"
    n_desc = n_inputs or (
        "N = 2 GiB / bytes of one input, clamped to [4, 16]: 16 at the CPU table's 1 MB inputs"
        if cpu else
        "N = 2 GiB / bytes of one input, clamped to [4, 16]: at 2^27 elements 4 for float32 and "
        "8 for bfloat16"
    )
    return (
        "Timing. Each implementation is wrapped in one jax.jit function that applies the op to a "
        f"tuple of N distinct random-normal inputs ({n_desc}), each of the full configured size, so "
        "the N kernels (or kernel sequences) run back to back with no host dispatch between them"
        + (". On CPU each such function also returns the sum of squares of its first input's "
           "first 2048 elements (about 1 us, the same for every implementation), so that XLA runs "
           "every program on its worker threads, as it does any program with real work: a program "
           "of jaxnorm's custom calls alone counts as cheap in XLA's cost model and would run inline "
           "on the calling thread, where freshly mapped output pages cost 2-4x the kernel time at "
           "1 MB (jaxnorm/_timing.py, _dispatch_anchor). " if cpu else
           " and, at 2^27 elements, the data far exceeds the 50 MB L2. ")
        + "The first call (compile) and 2 "
        "more warm-up calls are not timed; then each call is wall-clocked with time.perf_counter "
        f"around the call plus jax.block_until_ready, at least {reps} times ("
        + (f"and until {min_time:g} s is spent, " if min_time > 0 else "")
        + f"stopping after {max_time:g} s), and the reported per-input time is the "
        "median call time / N"
        + (f" (the implementations are timed in turn {rounds} times and each keeps its best "
           "round's median). " if rounds > 1 else ". ")
        + "Each call's fixed host cost (dispatch + sync, measured as the same "
        "wrapper around N tiny inputs and recorded as call_overhead_s) is included, divided by N. "
        + ops_text()
        + "Copy baseline: the same N-input wrapper, timed the same way at the same size and dtype, "
        "around two copies that XLA cannot elide: y = x * s with s a runtime scalar argument "
        "(1.0), an elementwise fusion, and y = jnp.copy(x), an HLO copy into a new buffer (the "
        "outputs may not alias the undonated inputs; a device memcpy on GPU); bytes = read x + "
        "write y; the faster of the two is the reference. '% of copy' = op bandwidth / copy "
        "bandwidth. "
        + check_text()
    )


def ops_text() -> str:
    """What every timer measures: the functions timed and the bytes counted."""
    return (
        "Forward: y = op(x[, scale, bias]). Forward+backward: jax.jit of a function that, per input, "
        "runs jax.vjp of the op with respect to x (and scale, bias for the norms) and applies the "
        "pullback to a random-normal cotangent dy, returning y and every gradient; the identical "
        "function is built around jaxnorm and around the XLA baseline, which is "
        "jaxnorm.reference (the plain jax.numpy specification of each op) compiled by XLA. "
        "Norm parameters are float32 (scale = 1 + 0.1 n, bias = 0.1 n), epsilon = 1e-6; softmax "
        "over the last axis, no mask. "
        "Effective bandwidth counts the fewest bytes: forward = read x + write y; forward+backward "
        "= forward + read x (or y) + read dy + write dx (5 passes over an input-sized tensor), "
        "plus the float32 scale/bias read in the forward and in the backward and their gradients "
        "written (negligible). "
    )


def check_text() -> str:
    tol = "; ".join(f"{k}: atol = rtol = {v[0]:g}" for k, v in CHECK_TOL.items() if k != "float16")
    return (
        "Speedup = XLA time / jaxnorm time (> 1: jaxnorm faster). "
        "Check: after timing, the outputs for the first input (y and every gradient) of each "
        "implementation are compared with the XLA baseline's; pass when "
        f"max |a - b| / (atol * max|ref| + rtol * |ref|) <= 1 ({tol}); NaN fails."
    )


# ----------------------------------------------------------------------------------------------
# Implementations


# Implementations timed only forward+backward: their forward is jaxnorm's own kernel.
BACKWARD_ONLY = ("jaxnorm-me",)


def implementations(include_tokamax: bool = True,
                    include_memory_efficient: bool = False) -> dict[str, dict[str, Callable]]:
    """name -> {op -> f(x, *params)}. 'xla' is jaxnorm.reference (the spec) compiled by XLA;
    'jaxnorm-me' is the norms in memory-efficient mode (the backward reads y instead of x)."""
    import jaxnorm
    from jaxnorm import reference

    impls = {
        "jaxnorm": {
            "layer_norm": lambda x, s, b: jaxnorm.layer_norm(x, s, b, epsilon=EPSILON),
            "rms_norm": lambda x, s: jaxnorm.rms_norm(x, s, epsilon=EPSILON),
            "softmax": lambda x: jaxnorm.softmax(x, axis=-1),
            "log_softmax": lambda x: jaxnorm.log_softmax(x, axis=-1),
        },
        "xla": {
            "layer_norm": lambda x, s, b: reference.layer_norm(x, s, b, epsilon=EPSILON),
            "rms_norm": lambda x, s: reference.rms_norm(x, s, epsilon=EPSILON),
            "softmax": lambda x: reference.softmax(x, axis=-1),
            "log_softmax": lambda x: reference.log_softmax(x, axis=-1),
        },
    }
    if include_memory_efficient:
        impls["jaxnorm-me"] = {
            "layer_norm": lambda x, s, b: jaxnorm.layer_norm(x, s, b, epsilon=EPSILON,
                                                             memory_efficient=True),
            "rms_norm": lambda x, s: jaxnorm.rms_norm(x, s, epsilon=EPSILON, memory_efficient=True),
        }
    if include_tokamax:
        tk = try_import_tokamax()
        if tk is not None:
            impls["tokamax"] = {
                "layer_norm": lambda x, s, b: tk.layer_norm(
                    x, s, b, axis=-1, epsilon=EPSILON, implementation="triton"),
                "rms_norm": lambda x, s: tk.layer_norm(
                    x, s, None, axis=-1, epsilon=EPSILON, subtract_mean=False,
                    implementation="triton"),
            }
    return impls


def try_import_tokamax():
    try:
        import tokamax  # type: ignore[import-not-found]
    except Exception:  # not installed, or broken: never fatal
        return None
    return tokamax


def make_step(fn: Callable, direction: str, n_inputs: int, anchor: bool | None = None) -> Callable:
    """jax.jit'ed f(xs, dys, params) over N inputs; with `anchor` (default: on CPU) the program
    also computes a small anchor that XLA does not count as cheap (see _dispatch_anchor).

    fwd:     returns (y_0, ..., y_{N-1})
    fwd+bwd: returns ((y, dx[, dscale[, dbias]]) for each input)
    """
    if direction == "fwd":

        def step(xs, dys, params):
            del dys
            return tuple(fn(x, *params) for x in xs)

    elif direction == "fwd+bwd":

        def step(xs, dys, params):
            out = []
            for x, dy in zip(xs, dys):
                y, pullback = jax.vjp(fn, x, *params)
                out.append((y, *pullback(dy)))
            return tuple(out)

    else:
        raise ValueError(f"unknown direction {direction!r}")
    if not (jax.default_backend() == "cpu" if anchor is None else anchor):
        return jax.jit(step)
    anchored = jax.jit(lambda xs, dys, params: (step(xs, dys, params), _dispatch_anchor(xs[0])))
    return lambda xs, dys, params: anchored(xs, dys, params)[0]


# XLA's CPU client runs a program that its cost model counts as cheap (under 1000 flops, where a
# custom call counts -1) inline on the calling thread, and any other program on its worker
# threads. A program of jaxnorm's custom calls alone is "cheap"; the jax.numpy reference is not.
# Their outputs were then allocated on different threads: jaxnorm's from the Python thread's
# heap, which glibc trims as they are freed, so that at 1 MB every call wrote fresh pages and
# paid 2-4x its kernel time in page faults, and XLA's from a worker thread's arena, reused
# warm. In a model the ops sit in programs with other work and run on the worker threads, so
# on CPU every timed function gets other work, the same for every implementation: the sum of
# squares of the first input's first 2048 elements (about a microsecond), returned and dropped.
ANCHOR_ELEMENTS = 2048


def _dispatch_anchor(x):
    return jnp.sum(jnp.square(x.reshape(-1)[:ANCHOR_ELEMENTS].astype(jnp.float32)))


def make_copy(n_inputs: int) -> Callable:
    """Copy baseline "mul": y = x * s for each input, s a runtime scalar (not foldable)."""
    return jax.jit(lambda xs, s: tuple(x * s for x in xs))


def make_memcpy(n_inputs: int) -> Callable:
    """Copy baseline "copy": jnp.copy of each input, an HLO copy to a new buffer (not elided:
    the outputs may not alias the undonated inputs)."""
    return jax.jit(lambda xs: tuple(jnp.copy(x) for x in xs))


# ----------------------------------------------------------------------------------------------
# Data


@partial(jax.jit, static_argnums=(1, 2))
def _normal(key, shape, dtype):
    return jax.random.normal(key, shape, dtype)


HOST_GEN_MAX = 1 << 20  # inputs up to this many elements are drawn by numpy (no compile)


def make_inputs(seed: int, shape: tuple[int, ...], dtype, n: int, with_dy: bool = True):
    """N distinct random-normal x (and dy, or None), and float32 (scale, bias) shaped like the
    last axis: scale = 1 + 0.1 n, bias = 0.1 n. Never zeros. Large inputs are drawn on the
    device (one compile per shape and dtype), small ones by numpy."""
    shape = tuple(shape)
    cols = shape[-1]
    if math.prod(shape) <= HOST_GEN_MAX:
        rng = np.random.default_rng(seed)

        def draw(sh, dt):
            return jnp.asarray(rng.standard_normal(sh, np.float32).astype(dt))
    else:
        keys = iter(jax.random.split(jax.random.key(seed), 2 * n + 2))

        def draw(sh, dt):
            return _normal(next(keys), sh, dt)

    xs = tuple(draw(shape, dtype) for _ in range(n))
    dys = tuple(draw(shape, dtype) for _ in range(n)) if with_dy else None
    scale = 1.0 + 0.1 * draw((cols,), jnp.float32)
    bias = 0.1 * draw((cols,), jnp.float32)
    out = (xs, dys, (scale, bias))
    jax.block_until_ready(out)
    return out


# ----------------------------------------------------------------------------------------------
# Bytes


def min_bytes(op: str, direction: str, rows: int, cols: int, itemsize: int) -> int:
    """Fewest bytes one input's op must move (see method_text)."""
    n = rows * cols * itemsize
    p = N_PARAMS[op] * cols * 4
    if direction == "fwd":
        return 2 * n + p
    return 5 * n + 3 * p  # params read in fwd and bwd, gradients written


# ----------------------------------------------------------------------------------------------
# Timing


def time_call(f: Callable, args: Sequence, *, reps: int, min_time: float = 0.0,
              max_time: float = math.inf, warmup: int = 2) -> dict:
    """Wall-clock f(*args) (block_until_ready), after one compile call and `warmup` calls.

    Returns {"compile_s", "times_s" (every timed call), "median_s", "min_s"}. Runs at least
    `reps` calls (at least 3 if max_time cuts in), keeps going until `min_time` seconds are
    spent (at most 20 * reps calls), and stops once `max_time` seconds are spent.
    """
    t0 = time.perf_counter()
    out = f(*args)
    jax.block_until_ready(out)
    compile_s = time.perf_counter() - t0
    del out
    for _ in range(warmup):
        out = f(*args)
        jax.block_until_ready(out)
        del out
    times: list[float] = []
    total = 0.0
    while True:
        t0 = time.perf_counter()
        out = f(*args)
        jax.block_until_ready(out)
        dt = time.perf_counter() - t0
        del out
        times.append(dt)
        total += dt
        n = len(times)
        if n >= 3 and total >= max_time:
            break
        if n >= reps and (total >= min_time or n >= 20 * reps):
            break
    return {
        "compile_s": compile_s,
        "times_s": times,
        "median_s": statistics.median(times),
        "min_s": min(times),
    }


# ----------------------------------------------------------------------------------------------
# Checking


@jax.jit
def _compare_leaves(got, want, atol, rtol):
    out = []
    for a, b in zip(got, want):
        a = a.astype(jnp.float32)
        b = b.astype(jnp.float32)
        err = jnp.where(a == b, 0.0, jnp.abs(a - b))  # equal infinities are no error
        finite_b = jnp.where(jnp.isfinite(b), jnp.abs(b), 0.0)
        ref_max = jnp.max(finite_b)
        bound = jnp.maximum(atol * ref_max + rtol * finite_b, jnp.float32(1e-30))
        out.append(jnp.stack([jnp.max(err / bound), jnp.max(err), ref_max]))
    return out


def _compare_host(a, b, atol, rtol):
    with np.errstate(invalid="ignore"):
        err = np.where(a == b, 0.0, np.abs(a - b))
        finite_b = np.where(np.isfinite(b), np.abs(b), 0.0)
        ref_max = float(finite_b.max()) if finite_b.size else 0.0
        bound = np.maximum(atol * ref_max + rtol * finite_b, 1e-30)
        ratio = float(np.max(err / bound)) if err.size else 0.0
        return [ratio, float(np.max(err)) if err.size else 0.0, ref_max]


def compare(got, want, dtype_name: str) -> dict:
    """Compares two output pytrees leaf by leaf (see CHECK_TOL). NaN anywhere fails."""
    atol, rtol = CHECK_TOL[dtype_name]
    g = jax.tree_util.tree_leaves(got)
    w = jax.tree_util.tree_leaves(want)
    if len(g) != len(w):
        return {"pass": False, "detail": f"{len(g)} outputs vs {len(w)} in the reference"}
    for a, b in zip(g, w):
        if a.shape != b.shape:
            return {"pass": False, "detail": f"shape {a.shape} vs reference {b.shape}"}
    if sum(a.size for a in g) <= HOST_GEN_MAX:
        vals = [_compare_host(np.asarray(a, np.float32), np.asarray(b, np.float32), atol, rtol)
                for a, b in zip(g, w)]
    else:
        vals = np.asarray(jax.device_get(_compare_leaves(g, w, atol, rtol)), dtype=np.float64)
    ratios = [float(v[0]) for v in vals]
    worst = max(ratios, key=lambda r: math.inf if math.isnan(r) else r)
    ok = all(r <= 1.0 for r in ratios)  # NaN compares False: fails
    return {
        "pass": bool(ok),
        "worst_ratio": _finite_or_str(worst),
        "max_abs_err": [_finite_or_str(float(v[1])) for v in vals],
        "ref_max_abs": [_finite_or_str(float(v[2])) for v in vals],
        "atol": atol,
        "rtol": rtol,
    }


def _finite_or_str(v: float):
    return v if math.isfinite(v) else str(v)


# ----------------------------------------------------------------------------------------------
# One configuration


def run_copy(xs, *, reps: int, min_time: float, max_time: float) -> dict:
    """Times the copy baselines over the N inputs `xs` and keeps the faster as the reference:
    "mul", y = x * s (s a runtime scalar: an XLA elementwise fusion that cannot be folded), and
    "copy", y = jnp.copy(x) (an HLO copy into a fresh buffer: a device memcpy on GPU)."""
    n, shape, dtype = len(xs), tuple(xs[0].shape), np.dtype(xs[0].dtype)
    nbytes = 2 * math.prod(shape) * dtype.itemsize
    rec = {"shape": list(shape), "dtype": dtype.name, "n_inputs": n, "bytes": nbytes,
           "variants": {}}
    s = jnp.asarray(1.0, dtype)
    variants = {"mul": (make_copy(n), (xs, s)), "copy": (make_memcpy(n), (xs,))}
    for name, (f, args) in variants.items():
        v: dict = {}
        rec["variants"][name] = v
        try:
            t = time_call(f, args, reps=reps, min_time=min_time, max_time=max_time)
            per = t["median_s"] / n
            v.update(time_s=per, bw_Bps=nbytes / per, compile_s=t["compile_s"],
                     reps=len(t["times_s"]), call_times_s=t["times_s"])
        except Exception as e:  # recorded, never fatal
            v["error"] = _err(e)
            gc.collect()
    ok = {k: v for k, v in rec["variants"].items() if "bw_Bps" in v}
    if ok:
        best = max(ok, key=lambda k: ok[k]["bw_Bps"])
        rec.update(best=best, time_s=ok[best]["time_s"], bw_Bps=ok[best]["bw_Bps"])
    else:
        rec["error"] = "; ".join(f"{k}: {v.get('error')}" for k, v in rec["variants"].items())
    return rec


def run_shape(shape, dtype_name: str, ops: Sequence[str], directions: Sequence[str],
              impls: dict, *, n: int, reps: int, min_time: float, max_time: float,
              seed: int = 0, copy: dict | None = None, on_result: Callable | None = None,
              rounds: int = 1, timer: Callable | None = None):
    """Makes one set of N inputs (x, dy, scale, bias) for (shape, dtype) and runs every
    (op, direction) on it, after timing the copy baseline on the same xs unless `copy` (an
    earlier run_copy record at this size) is given. Returns (copy_record, [config records]).
    `on_result(record)` is called after each configuration. Never raises for a config.
    `timer`: see run_config."""
    try:
        data = make_inputs(seed, shape, DTYPES[dtype_name], n, with_dy="fwd+bwd" in directions)
    except Exception as e:
        err = "inputs: " + _err(e)
        gc.collect()
        recs = [{"op": op, "direction": d, "dtype": dtype_name, "shape": list(shape),
                 "n_inputs": n, "error": err, "impls": {}} for op in ops for d in directions]
        for r in recs:
            if on_result:
                on_result(r)
        return copy or {"shape": list(shape), "dtype": dtype_name, "error": err}, recs
    if copy is None:
        copy = run_copy(data[0], reps=reps, min_time=min_time, max_time=max_time)
    copy_bw = copy.get("bw_Bps")
    recs = []
    for op in ops:
        for d in directions:
            r = run_config(op, d, data, impls, reps=reps, min_time=min_time,
                           max_time=max_time, copy_bw=copy_bw, rounds=rounds, timer=timer)
            recs.append(r)
            if on_result:
                on_result(r)
    del data
    gc.collect()
    return copy, recs


def run_config(op: str, direction: str, data, impls: dict, *, reps: int, min_time: float,
               max_time: float, copy_bw: float | None = None, rounds: int = 1,
               reference_impl: str = "xla", timer: Callable | None = None) -> dict:
    """Times every implementation in `impls` (name -> {op -> fn}) that has `op`, for one
    (op, direction) on `data` = (xs, dys, (scale, bias)) from make_inputs, and checks each
    against `reference_impl`'s outputs.

    By default each call is wall-clocked over all N inputs at once (time_call). `timer(step,
    calls)` replaces that (benchmarks/bench.py's device time): it gets the jitted step and one
    argument tuple per input, each holding that single input, and returns a dict with the
    seconds per input as "time_s" and anything else to record.

    Errors (an OOM, a missing kernel) are recorded in the result, never raised.
    """
    xs, dys, params = data
    n, shape, dtype = len(xs), tuple(xs[0].shape), np.dtype(xs[0].dtype)
    dtype_name = dtype.name
    rows, cols = math.prod(shape[:-1]), shape[-1]
    nbytes = min_bytes(op, direction, rows, cols, dtype.itemsize)
    rec = {
        "op": op, "direction": direction, "dtype": dtype_name, "shape": list(shape),
        "rows": rows, "cols": cols, "elements": rows * cols, "n_inputs": n,
        "bytes_per_input": nbytes, "copy_bw_Bps": copy_bw, "impls": {},
    }
    if direction == "fwd":
        dys = None
    elif dys is None:
        rec["error"] = "no cotangents in data (make_inputs(..., with_dy=True))"
        return rec
    params = tuple(params[: N_PARAMS[op]])
    firsts = {}
    order = [reference_impl] + [k for k in impls if k != reference_impl]
    order = [k for k in order if k in impls and op in impls[k]
             and not (direction == "fwd" and k in BACKWARD_ONLY)]
    steps = {}
    calls = None if timer is None else [
        ((x,), None if dys is None else (dys[i],), params) for i, x in enumerate(xs)]
    for rnd in range(max(1, rounds)):
        # Round 2+ re-times every implementation in turn; each keeps its best round's median,
        # so a slow phase of the machine that hits one implementation's turn does not count.
        for name in order:
            r = rec["impls"].setdefault(name, {})
            if "error" in r:
                continue
            try:
                if name not in steps:
                    steps[name] = make_step(impls[name][op], direction, n)
                step = steps[name]
                if timer is None:
                    t = time_call(step, (xs, dys, params), reps=reps, min_time=min_time,
                                  max_time=max_time, warmup=2 if rnd == 0 else 1)
                    r.setdefault("round_medians_s", []).append(t["median_s"] / n)
                    r.setdefault("call_times_s", []).extend(t["times_s"])
                    r.update(min_time_s=min(r["call_times_s"]) / n, reps=len(r["call_times_s"]))
                    if rnd == 0:
                        r["compile_s"] = t["compile_s"]
                else:
                    t = timer(step, calls)
                    r.setdefault("round_medians_s", []).append(t.pop("time_s"))
                    r.update(t)
                if rnd == 0:
                    # The first input's outputs, from the program that was timed (no new compile).
                    out = step(*calls[0]) if calls else step(xs, dys, params)
                    firsts[name] = out[0]
                    del out
                per = min(r["round_medians_s"])
                r.update(time_s=per, bw_Bps=nbytes / per)
                if copy_bw:
                    r["frac_copy"] = (nbytes / per) / copy_bw
            except Exception as e:
                r["error"] = _err(e)
                gc.collect()  # the traceback's frames may hold device buffers
    del steps
    ref = firsts.get(reference_impl)
    for name, r in rec["impls"].items():
        if name == reference_impl or "error" in r:
            continue
        if ref is None:
            r["check"] = {"pass": None, "detail": f"no {reference_impl} output to compare with"}
            continue
        try:
            r["check"] = compare(firsts[name], ref, dtype_name)
        except Exception as e:
            r["check"] = {"pass": False, "detail": "compare failed: " + _err(e)}
    a, b = rec["impls"].get("jaxnorm", {}), rec["impls"].get(reference_impl, {})
    if "time_s" in a and "time_s" in b:
        rec["speedup"] = b["time_s"] / a["time_s"]
    del xs, dys, params, firsts, ref, calls
    return rec


def _err(e: BaseException, limit: int = 600) -> str:
    s = f"{type(e).__name__}: {e}"
    return s if len(s) <= limit else s[:limit] + " ..."


# ----------------------------------------------------------------------------------------------
# Formatting


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f}us"
    if s < 1:
        return f"{s * 1e3:.2f}ms"
    return f"{s:.2f}s"


def fmt_bw(bps: float | None) -> str:
    if bps is None:
        return "-"
    if bps >= 1e12:
        return f"{bps / 1e12:.2f}TB/s"
    return f"{bps / 1e9:.1f}GB/s"


def check_mark(r: dict) -> str:
    if "error" in r:
        return "ERR"
    c = r.get("check")
    if c is None:
        return "ref"
    return {True: "ok", False: "FAIL", None: "?"}[c.get("pass")]
