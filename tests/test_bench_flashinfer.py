"""benchmarks/flashinfer_ncu.py: each anchor entry's kernels, between its two markers in Nsight
Compute's CSV, summed and divided by the calls per entry, on fabricated files."""
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "flashinfer_ncu.py"
HEADER = '"ID","Kernel Name","Context","Section Name","Metric Name","Metric Unit","Metric Value"'


def run(tmp_path, stdout, kernels):
    out, csv = tmp_path / "fis.out", tmp_path / "ncu.csv"
    out.write_text(stdout)
    rows = [f'"{i}","{name}","1","Command line profiler metrics","gpu__time_duration.sum","{unit}","{value}"'
            for i, (name, value, unit) in enumerate(kernels)]
    csv.write_text("==PROF== Connected to process\n" + "\n".join([HEADER] + rows) + "\n")
    return subprocess.run([sys.executable, str(SCRIPT), str(out), str(csv)], capture_output=True, text=True)


STDOUT = """calls per entry: 2 (plus one warm-up)
B=1 V=128256 floor(read f32 @3TB/s) 0.2 us
  ENTRY B=1 V=128256 | softmax (OnlineSoftmax, temperature)          22.6 us
  ENTRY B=1 V=128256 | top_k k=50 sorted det ties-small              50.7 us
"""
MARK = ("fis_marker(int)", "2,272", "nsecond")


def test_entries_sum_their_kernels_per_call(tmp_path):
    softmax = [("void flashinfer::sampling::OnlineSoftmaxMapKernel<float, 4>(float *)", "20,000", "nsecond"),
               ("void flashinfer::sampling::OnlineSoftmaxReduceKernel<float>(float *)", "7", "usecond")]
    top_k = [("void flashinfer::FilteredTopKUnifiedKernel<float, int, 4, true>(float *)", "45,000", "nsecond"),
             ("void flashinfer::StableSortTopKByValueKernel<128u, 8u, int, float>(int *)", "9,000", "nsecond")]
    setup = [("void gen_sequenced<curandStateXORWOW, float>(float *)", "126,400", "nsecond")]
    kernels = [MARK] + softmax * 3 + [MARK] + setup + [MARK] + top_k * 3 + [MARK] + setup
    r = run(tmp_path, STDOUT, kernels)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("| B=")]
    assert len(lines) == 2
    assert "| 27.0 |" in lines[0] and "OnlineSoftmaxMapKernel ×1" in lines[0]
    assert "| 54.0 |" in lines[1] and "gen_sequenced" not in lines[1]  # the next shape's set-up is outside


def test_marker_count_must_match_entries(tmp_path):
    r = run(tmp_path, STDOUT, [MARK, ("void flashinfer::X(int)", "1,000", "nsecond"), MARK])
    assert r.returncode != 0 and "1 entries marked in the profile, 2 printed" in r.stderr + r.stdout
