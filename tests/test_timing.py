"""The benchmark machinery (jaxnorm/_timing.py) on a small shape: each implementation is timed
and its outputs checked against XLA's, and memory-efficient mode is timed forward+backward only."""
import pytest

from jaxnorm import _timing as T


@pytest.mark.parametrize("op", ["layer_norm", "rms_norm"])
def test_memory_efficient_mode_timed_and_checked(op):
    impls = T.implementations(include_tokamax=False, include_memory_efficient=True)
    data = T.make_inputs(0, (8, 96), T.DTYPES["float32"], 2)
    fwd = T.run_config(op, "fwd", data, impls, reps=1, min_time=0.0, max_time=0.1)
    both = T.run_config(op, "fwd+bwd", data, impls, reps=1, min_time=0.0, max_time=0.1)
    # The forward is the default kernel: memory-efficient mode is not timed there.
    assert set(fwd["impls"]) == {"xla", "jaxnorm"}
    assert set(both["impls"]) == {"xla", "jaxnorm", "jaxnorm-me"}
    for name in ("jaxnorm", "jaxnorm-me"):
        r = both["impls"][name]
        assert "error" not in r, r.get("error")
        assert r["time_s"] > 0
        assert r["check"]["pass"] is True, r["check"]


def test_memory_efficient_only_for_norms():
    impls = T.implementations(include_tokamax=False, include_memory_efficient=True)
    assert set(impls["jaxnorm-me"]) == {"layer_norm", "rms_norm"}
    data = T.make_inputs(0, (4, 64), T.DTYPES["float32"], 2)
    rec = T.run_config("softmax", "fwd+bwd", data, impls, reps=1, min_time=0.0, max_time=0.1)
    assert set(rec["impls"]) == {"xla", "jaxnorm"}


def test_timer_times_one_input_per_call():
    """bench.py's device timer replaces the wall clock: it is handed one call per input, each
    holding that one input, and what it returns is recorded; the outputs are still checked."""
    impls = T.implementations(include_tokamax=False)
    data = T.make_inputs(0, (8, 96), T.DTYPES["float32"], 3)
    seen = []

    def timer(step, calls):
        seen.append([len(xs) for xs, _, _ in calls])
        T.time_call(step, calls[0], reps=1)  # the step runs on a single input
        return {"time_s": 1e-3, "kernels_per_call": 1.0}

    rec = T.run_config("rms_norm", "fwd+bwd", data, impls, reps=1, min_time=0.0, max_time=0.1,
                       copy_bw=1e9, timer=timer)
    assert seen == [[1, 1, 1], [1, 1, 1]]  # xla, then jaxnorm
    r = rec["impls"]["jaxnorm"]
    assert r["time_s"] == 1e-3 and r["kernels_per_call"] == 1.0
    assert r["bw_Bps"] == rec["bytes_per_input"] / 1e-3
    assert r["frac_copy"] == r["bw_Bps"] / 1e9
    assert r["check"]["pass"] is True, r["check"]
