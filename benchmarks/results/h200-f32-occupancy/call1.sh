# One call on a fresh H200: build the float32 occupancy change (row_tiles.cuh min_ctas_per_sm: float32
# softmax's 256x8 tiles at four CTAs an SM; 512-thread float32 clusters of 16 at two), the row
# families' tests, then bench.py --timer device, float32, jaxnorm and XLA, 4096 (control, no kernel
# changed) to 262144 columns. The base is h200-rows-8da2339's call (same method, QuACK there).
#   COMMIT=<hash> bash benchmarks/results/h200-f32-occupancy/call1.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
t0=$SECONDS; timeout 130 python3 -m pytest -q -n 16 -p no:cacheprovider -p no:benchmark tests/test_ops.py \
  tests/test_norm.py tests/test_softmax.py tests/test_add_norm.py > $OUT/pytest.log 2>&1
echo "pytest rc=$? $((SECONDS - t0)) s: $(tail -n 1 $OUT/pytest.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -20
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8; unset XLA_PYTHON_CLIENT_PREALLOCATE
timeout 120 python3 benchmarks/bench.py --timer device --out $OUT --ops softmax,log_softmax,rms_norm,layer_norm \
  --dtypes float32 --widths 4096,16384,32768,65536,131072,262144 --small none --impls jaxnorm,xla --budget 95 \
  > $OUT/bench.log 2>&1; echo "bench rc=$?"
sed -n '/TB\/s by width/,/^## Summary/p' $OUT/bench.md | grep float32
echo "total $SECONDS s"
