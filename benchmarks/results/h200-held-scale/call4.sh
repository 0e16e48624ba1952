# The final commit (the pushed maximum in the 512-thread instances only): build, then the sampling
# tests for as long as the session's last device seconds allow (-v, so a cut run still says which
# passed). Run from the repository root: COMMIT=<hash> bash benchmarks/results/h200-held-scale/call4.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a $OUT/log.txt) 2>&1
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
timeout $((205 - SECONDS)) python3 -m pytest -v -n 16 -p no:benchmark tests/test_sampling.py > $OUT/pytest.log 2>&1
echo "pytest rc=$? at $SECONDS s"
echo "passed $(grep -c ' PASSED ' $OUT/pytest.log) failed $(grep -c ' FAILED ' $OUT/pytest.log) skipped $(grep -c ' SKIPPED ' $OUT/pytest.log)"
grep -E " FAILED |^E " $OUT/pytest.log | head -10; tail -n 1 $OUT/pytest.log
