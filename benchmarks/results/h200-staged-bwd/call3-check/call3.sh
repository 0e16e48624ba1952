# The session's last device seconds (231 s of budget): main after the staging helpers' refactor
# (53027b5) and the vmapped wide-rows test (16d7c08), built and run through the wide norm tests.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a $OUT/log.txt) 2>&1
echo "commit $COMMIT"
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
timeout $((150 - SECONDS)) python3 -m pytest -q -n 16 -p no:benchmark tests/test_transforms.py tests/test_norm.py \
  -k "grouped_backward or many_wide_rows or memory_efficient_wide" > $OUT/pytest.log 2>&1
echo "pytest rc=$?"; tail -n 1 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head; echo "total $SECONDS s"
