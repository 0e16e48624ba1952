# The merged tree (16-bit RMSNorm's forward clusters of 8 staged at two CTAs an SM): the build,
# the norm tests first (the changed kernels), the whole suite, then bench.py --timer device for
# the RMSNorm forward against XLA (bf16, 16384-262144, rows of 2^27 elements and few rows).
# Run from the repository root: COMMIT=<hash> bash benchmarks/results/h200-staged-2cta/call4.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/rows"
exec > >(tee -a $OUT/log.txt) 2>&1
echo "commit $COMMIT"
source benchmarks/gpu_setup.sh
bash benchmarks/build_profile.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
t0=$SECONDS; timeout 60 python3 -m pytest -q -n 16 -p no:benchmark tests/test_norm.py -k "many_wide_rows" > $OUT/pytest-norm.log 2>&1
tail -n 1 $OUT/pytest-norm.log; grep -E "^(FAILED|ERROR)" $OUT/pytest-norm.log | head; echo "wide norm tests $((SECONDS - t0)) s"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.5
timeout 60 python3 benchmarks/bench.py --timer device --impls jaxnorm,xla --no-tokamax --ops rms_norm \
  --dtypes bfloat16 --directions fwd --widths 16384,32768,65536,131072,262144 --small none --budget 50 \
  --out $OUT/rows > $OUT/rows/bench.log 2>&1; echo "rows rc=$? $SECONDS s"
grep -E "copy|^\| bfloat16 \| rms_norm \| fwd" $OUT/rows/bench.md | head -12
timeout 40 python3 benchmarks/ab_rows.py new 131072,64x131072,128x131072,256x131072 bfloat16 rms_norm 2>&1 | grep "^\["
rm -f $OUT/rows/bench.png
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05
t0=$SECONDS; timeout $((585 - SECONDS)) python3 -m pytest -q -n 16 -p no:benchmark tests > $OUT/pytest.log 2>&1
tail -n 2 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -20; echo "suite $((SECONDS - t0)) s"
echo "total $SECONDS s"
