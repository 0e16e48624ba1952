"""benchmarks/bench.py's QuACK columns: QuACK's PyTorch timings (quack_torch.py --ops rows) merged
into a bench.json's configurations and shown in the TB/s-by-width table, on fabricated files."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
bench = pytest.importorskip("bench")  # needs benchmarks/device_time.py's JAX profiler import

from jaxnorm import _timing as T  # noqa: E402


def record(op, direction, cols, jaxnorm_tb_s, rows=64, dtype="bfloat16"):
    return {"op": op, "direction": direction, "dtype": dtype, "shape": [rows, cols], "rows": rows,
            "cols": cols, "n_inputs": 2, "group": "sweep", "copy_bw_Bps": 3e12,
            "impls": {"xla": {"time_s": 1.0, "bw_Bps": 1e12},
                      "jaxnorm": {"time_s": 1.0, "bw_Bps": jaxnorm_tb_s * 1e12, "check": {"pass": True}}}}


def fabricated(tmp_path):
    result = {
        "env": {"device_kind": "fake", "backend": "gpu", "jax_version": "0", "jaxlib_version": "0",
                "jaxnorm_version": "0", "git_commit": "0" * 40, "cuda_built": True,
                "timestamp_utc": "now"},
        "args": {"ops": list(T.OPS), "directions": list(T.DIRECTIONS), "dtypes": ["bfloat16"],
                 "elements": 65536},
        "timer": "device", "method": "fabricated", "copy": [], "skipped": [],
        "copy_ceiling_Bps": 3e12,
        "results": [record("rms_norm", "fwd", 1024, 2.0), record("softmax", "fwd+bwd", 1024, 2.5),
                    record("softmax", "fwd", 1024, 2.0), record("log_softmax", "fwd", 1024, 2.0)],
    }
    # QuACK's JAX softmax, timed in the run: preferred over its PyTorch number for the same cell.
    result["results"][2]["impls"]["quack"] = {"time_s": 1.0, "bw_Bps": 1.6e12, "check": {"pass": True}}
    q = {"device": "fake", "torch": "0", "copy_tb_s": 2.5, "method": "fabricated", "results": [
        {"op": "rms_norm", "impl": "quack", "rows": 64, "cols": 1024, "dtype": "bfloat16",
         "direction": "fwd", "us": 0.25, "ok": True, "worst_ratio": 0.1},
        {"op": "softmax", "impl": "quack", "rows": 64, "cols": 1024, "dtype": "bfloat16",
         "direction": "fwd+bwd", "error": "ValueError: unsupported", "ok": False},
        {"op": "softmax", "impl": "quack", "rows": 64, "cols": 1024, "dtype": "bfloat16",
         "direction": "fwd", "us": 1.0, "ok": True},
        {"op": "rms_norm", "impl": "quack", "rows": 32, "cols": 2048, "dtype": "bfloat16",
         "direction": "fwd", "us": 1.0, "ok": True},  # a shape the run does not have
        {"op": "cross_entropy", "impl": "quack", "rows": 64, "vocab": 1024, "dtype": "bfloat16",
         "direction": "fwd", "us": 1.0, "tb_s": 1.0, "ok": True},  # not a row op
    ]}
    bench_json, quack_json = tmp_path / "bench.json", tmp_path / "quack_torch.json"
    bench_json.write_text(json.dumps(result))
    quack_json.write_text(json.dumps(q))
    return result, bench_json, quack_json


def test_merge_quack_torch(tmp_path):
    result, _, quack_json = fabricated(tmp_path)
    assert bench.merge_quack_torch(result, [str(quack_json)]) == 3
    rms = result["results"][0]["impls"]["quack-torch"]
    nbytes = T.min_bytes("rms_norm", "fwd", 64, 1024, 2)  # bench.py's bytes, not quack_torch's
    assert rms["time_s"] == pytest.approx(0.25e-6)
    assert rms["bw_Bps"] == pytest.approx(nbytes / 0.25e-6)
    assert rms["frac_copy"] == pytest.approx(rms["bw_Bps"] / 2.5e12)  # its own ceiling, in torch
    assert rms["check"]["pass"] is True
    assert "error" in result["results"][1]["impls"]["quack-torch"]
    assert "quack-torch" not in result["results"][3]["impls"]
    assert any("[quack-torch]" in e for e in bench.errors_list(result))

    table = bench.width_table(result).splitlines()
    row = next(r for r in table if "| rms_norm | fwd | 1024 |" in r)
    cells = [c.strip() for c in row.strip("|").split("|")]
    tb_s = nbytes / 0.25e-6 / 1e12
    assert cells[4:] == ["2.00", f"{tb_s:.2f} (T)", "1.00", "3.00", f"{2.0 / tb_s:.2f}", "2.00"]
    sm = next(r for r in table if "| softmax | fwd | 1024 |" in r)
    assert "1.60 (J)" in sm and "| 1.25 |" in sm  # the JAX binding's number, jaxnorm / QuACK


def test_render_merges_into_bench_md(tmp_path):
    _, bench_json, quack_json = fabricated(tmp_path)
    out = tmp_path / "out"
    assert bench.main(["--render", str(bench_json), "--quack-json", str(quack_json), "--out", str(out)]) == 0
    md = (out / "bench.md").read_text()
    assert "## TB/s by width" in md and "(T)" in md and "3 configurations from" in md
    assert json.loads((out / "bench.json").read_text())["quack_torch"]["merged"] == 3


def test_merge_several_files(tmp_path):
    """Widths split over two calls: both files merge, each with its own copy ceiling."""
    result, _, quack_json = fabricated(tmp_path)
    q = json.loads(quack_json.read_text())
    first, second = dict(q, results=q["results"][:1]), dict(q, results=q["results"][1:], copy_tb_s=5.0)
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, part in zip(paths, (first, second)):
        path.write_text(json.dumps(part))
    assert bench.merge_quack_torch(result, [str(p) for p in paths]) == 3
    rms, sm = result["results"][0]["impls"]["quack-torch"], result["results"][2]["impls"]["quack-torch"]
    assert rms["frac_copy"] == pytest.approx(rms["bw_Bps"] / 2.5e12)
    assert sm["frac_copy"] == pytest.approx(sm["bw_Bps"] / 5e12)
    assert [f["path"] for f in result["quack_torch"]["files"]] == [str(p) for p in paths]
