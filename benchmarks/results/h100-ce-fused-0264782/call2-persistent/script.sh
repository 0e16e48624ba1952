# CE persistent fused kernel: build, tests, bench, ncu of the fused kernel
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_PREALLOCATE=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-ce .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site-ce
XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 timeout 150 python3 -m pytest -q -n 10 -rf --tb=short -p no:benchmark tests/test_cross_entropy.py tests/test_ffi_targets.py tests/test_export.py tests/test_softmax.py tests/test_norm.py > $OUT/pytest.log 2>&1
tail -n 1 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -10
echo "tests done $SECONDS"
XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 timeout 170 python3 benchmarks/bench_cross_entropy.py --out /tmp/b1 --dtypes bfloat16 > $OUT/bench-bf16.log 2>&1
grep -E "jaxnorm|optax" $OUT/bench-bf16.log | grep -v "^W1" | tail -12
cp /tmp/b1/cross_entropy.md $OUT/ce-bf16.md
echo "bench bf16 done $SECONDS"
XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 timeout $((480 - SECONDS)) python3 benchmarks/bench_cross_entropy.py --out /tmp/b2 --dtypes float32 --vocabs 128256,32000 > $OUT/bench-f32.log 2>&1
grep -E "jaxnorm|optax" $OUT/bench-f32.log | grep -v "^W1" | tail -8
cp /tmp/b2/cross_entropy.md $OUT/ce-f32.md
echo "bench f32 done $SECONDS"
timeout $((580 - SECONDS)) ncu --kernel-name regex:fwd_grad --launch-skip 2 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats python3 .scratch/ce_ncu.py 8192 128256 bfloat16 > $OUT/ncu-fused.txt 2>&1
grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers|Stall|Compute \(SM\)" $OUT/ncu-fused.txt | head -20
echo "total $SECONDS s"
