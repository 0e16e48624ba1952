OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-ce .whl/*.whl 2>&1 | tail -2
XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 timeout 60 python3 -m pytest -q -n 12 -rf --tb=short -p no:benchmark tests/test_cross_entropy.py > $OUT/pytest-ce.log 2>&1
tail -n 1 $OUT/pytest-ce.log; grep -E "^(FAILED|ERROR)" $OUT/pytest-ce.log | head -10
echo "ce tests $SECONDS"
PYTHONPATH=/tmp/site-ce XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 timeout 60 python3 benchmarks/bench_cross_entropy.py --out /tmp/b1 --dtypes bfloat16 > $OUT/bench-bf16.log 2>&1
cp /tmp/b1/cross_entropy.md $OUT/ce-bf16.md; cp /tmp/b1/cross_entropy.json $OUT/ce-bf16.json
grep -E "fwd\+bwd" $OUT/bench-bf16.log | grep -v "^W1" | cut -c1-110
PYTHONPATH=/tmp/site-ce XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 timeout 45 python3 benchmarks/bench_cross_entropy.py --out /tmp/b2 --dtypes float32 --vocabs 128256,32000 > $OUT/bench-f32.log 2>&1
cp /tmp/b2/cross_entropy.md $OUT/ce-f32.md
grep -E "fwd\+bwd" $OUT/bench-f32.log | grep -v "^W1" | cut -c1-110
echo "bench $SECONDS"
XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 timeout $((330 - SECONDS)) python3 -m pytest -q -n 12 -rf --tb=short -p no:benchmark tests/test_softmax.py tests/test_norm.py tests/test_add_norm.py tests/test_ffi_targets.py tests/test_export.py > $OUT/pytest-rows.log 2>&1
tail -n 1 $OUT/pytest-rows.log; grep -E "^(FAILED|ERROR)" $OUT/pytest-rows.log | head -10
echo "total $SECONDS s"
