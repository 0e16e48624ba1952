# Prepared, not run: LayerNorm's held-scale backward tiles also stage x (ln-stage-x.patch) against
# main, in one call on the H200. From the repository root of a branch with the patch applied and
# committed, after `mkdir -p .scratch/base && git archive main ffi_src | tar -x -C .scratch/base`:
#   COMMIT=<hash> bash benchmarks/results/next-ln-stage-x/ab.sh        (carry .scratch)
# First the norm tests on the patched tree, then benchmarks/ab_base.sh's alternating builds.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a $OUT/log.txt) 2>&1
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
timeout 110 python3 -m pytest -q -n 16 -p no:benchmark tests/test_norm.py tests/test_transforms.py > $OUT/pytest.log 2>&1
tail -n 1 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -10
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.5
LIMIT=480 BASE=.scratch/base bash benchmarks/ab_base.sh \
  'python3 benchmarks/ab_rows.py $LABEL 32768,65536,131072,262144,64x131072 bfloat16,float16 layer_norm+bwd,rms_norm+bwd'
python3 benchmarks/ab_rows.py --compare $OUT/ab.log base new | tee $OUT/ab-rows.txt
echo "total $SECONDS s"
