# CE fused-grad branch: tests + bench
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export TEST_TIMEOUT=200 BENCH_TIMEOUT=260
export PYTEST_ARGS="-rf --tb=short tests/test_cross_entropy.py tests/test_ffi_targets.py tests/test_export.py tests/test_softmax.py"
export BENCH_ARGS="--dtypes bfloat16,float32"
bash benchmarks/gpu_cross_entropy.sh
grep -E "^(FAILED|ERROR)|Error|error:" $OUT/pytest-cross-entropy.log | head -20
echo "total $SECONDS s"
