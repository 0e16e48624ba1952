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
