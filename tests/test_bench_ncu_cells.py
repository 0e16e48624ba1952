"""benchmarks/ncu_cells.py: each cell's kernels split over its calls, summed a call, the median
taken, and jaxnorm against QuACK in one row, on fabricated Nsight Compute CSVs."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import ncu_cells  # noqa: E402

from jaxnorm import _timing as T  # noqa: E402

HEADER = '"ID","Kernel Name","Context","Section Name","Metric Name","Metric Unit","Metric Value"'


def write(path, kernels):
    rows = [f'"{i}","{name}","1","Command line profiler metrics","gpu__time_duration.sum","nsecond","{ns}"'
            for i, (name, ns) in enumerate(kernels)]
    path.write_text("==PROF== Connected to process\n" + "\n".join([HEADER] + rows) + "\n")


def test_cells_pair_the_libraries(tmp_path):
    staged = "void jaxnorm::staged_fwd_kernel<jaxnorm::NormFwdOp<__nv_bfloat16, 0>, 512, 4, 2>(T1, long, long)"
    write(tmp_path / "jaxnorm__rms_norm__fwd__4096x32768__bfloat16__3.csv",
          [(staged, "150,000"), (staged, "136,000"), (staged, "135,000")])
    quack = "kernel_cutlass_kernel_quackrmsnormRMSNorm_object_at__tensorptrbf16gmemalign8o32768i64div41_N_0"
    write(tmp_path / "quack__rms_norm__fwd__4096x32768__bfloat16__3.csv",
          [(quack, "136,000"), (quack, "137,000"), (quack, "170,000")])
    bwd = [("void jaxnorm::tile_fwd_kernel<A>(B)", "100,000"), ("void jaxnorm::tile_bwd_kernel<A>(B)", "200,000"),
           ("void jaxnorm::reduce_partials_kernel<A>(B)", "5,000")]
    write(tmp_path / "jaxnorm__rms_norm__fwdbwd__131072x1024__bfloat16__2.csv", bwd * 2)
    write(tmp_path / "quack__rms_norm__fwdbwd__131072x1024__bfloat16__2.csv", [(quack, "300,000")] * 3)  # uneven
    write(tmp_path / "jaxnorm__softmax__fwd__8192x16384__float32__3.csv", [])  # the process failed
    lines = ncu_cells.table(str(tmp_path)).splitlines()
    fwd = next(ln for ln in lines if "| rms_norm | fwd | 4096x32768 |" in ln)
    cells = [c.strip() for c in fwd.strip("|").split("|")]
    tb_s = T.min_bytes("rms_norm", "fwd", 4096, 32768, 2) / 136.0 / 1e6
    assert cells[4] == f"136.0 ({tb_s:.2f})"  # the median of the three calls
    assert cells[5].startswith("137.0 (")
    assert cells[6] == f"{137 / 136:.3f}"
    assert cells[7] == "staged_fwd_kernel" and cells[8] == quack[:40]
    both = next(ln for ln in lines if "| fwd+bwd | 131072x1024 |" in ln)
    cells = [c.strip() for c in both.strip("|").split("|")]
    assert cells[4].startswith("305.0 (")
    assert cells[5] == f"{900 / 2:.1f} ({T.min_bytes('rms_norm', 'fwd+bwd', 131072, 1024, 2) / 450 / 1e6:.2f}) uneven"
    assert cells[7] == "tile_fwd_kernel, tile_bwd_kernel, reduce_partials_kernel"
    failed = next(ln for ln in lines if "| softmax |" in ln)
    assert "| – | – | – |" in failed


def test_residual_add_cells_count_their_bytes(tmp_path):
    """The residual-add norms (profile_one.py's add_rms_norm) count bench_add_norm.py's bytes: read
    x and r, write y and h forward (4 N b); the backward adds h, dy, dh read and dx written."""
    name = "void jaxnorm::tile_fwd_kernel<jaxnorm::AddNormFwdOp<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 0>>(T1)"
    write(tmp_path / "jaxnorm__add_rms_norm__fwd__32768x1024__bfloat16__1.csv", [(name, "70,000")])
    write(tmp_path / "jaxnorm__add_layer_norm__fwdbwd__32768x1024__bfloat16__1.csv", [(name, "150,000")])
    lines = ncu_cells.table(str(tmp_path)).splitlines()
    fwd = next(ln for ln in lines if "| add_rms_norm | fwd |" in ln)
    assert f"70.0 ({4 * 32768 * 1024 * 2 / 70.0 / 1e6:.2f})" in fwd
    both = next(ln for ln in lines if "| add_layer_norm | fwd+bwd |" in ln)
    assert f"150.0 ({8 * 32768 * 1024 * 2 / 150.0 / 1e6:.2f})" in both
