# One build, A/B by TEMP switches read at each call:
# - JAXNORM_TEMP_NO_LN_HELD: LayerNorm's wide backward cluster tiles without the scale held in
#   shared memory (main's tile) against holding it (row_tiles.cuh, held_scale_bwd).
# - JAXNORM_TEMP_NO_LN_STAGED: 16-bit LayerNorm's forward clusters of 16 one-shot (main) against
#   staged (staged_fwd.cuh).
# - JAXNORM_TEMP_SAMPLER_AB: the general sampler's batch-1 chain: 1 the row parameters loaded before
#   the row's read, 2 the row maximum by st.async pushes instead of a fenced cluster barrier.
# First the wide norm tests (the new defaults) and the sampling tests with both sampler changes on.
# Run from the repository root: COMMIT=<hash> bash benchmarks/results/h200-held-scale/call2.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a $OUT/log.txt) 2>&1
echo "commit $COMMIT"
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
t0=$SECONDS
timeout 110 python3 -m pytest -q -n 16 -p no:benchmark tests/test_norm.py tests/test_transforms.py > $OUT/pytest.log 2>&1
tail -n 1 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -10; echo "norm tests $((SECONDS - t0)) s"
t0=$SECONDS
JAXNORM_TEMP_SAMPLER_AB=3 timeout 130 python3 -m pytest -q -n 16 -p no:benchmark tests/test_sampling.py >> $OUT/pytest.log 2>&1
tail -n 1 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -10; echo "sampling tests (AB=3) $((SECONDS - t0)) s"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.5
rows() {  # label, env...
  local lab=$1; shift; local t0=$SECONDS
  env "$@" timeout 60 python3 benchmarks/ab_rows.py $lab 32768,65536,131072,262144,64x131072 bfloat16 \
    layer_norm+bwd,layer_norm,rms_norm+bwd 2>&1 | grep "^\[" >> $OUT/ab.log
  echo "rows $lab: $((SECONDS - t0)) s"
}
samp() {
  local lab=$1; shift; local t0=$SECONDS
  env "$@" OUT=/tmp/ab timeout 45 python3 benchmarks/ab_sampling.py $lab 1,8 float32,bfloat16 \
    "top_k=50;top_k=50,top_p=0.9;top_p=0.9" 128256 2>&1 | grep -E " us " >> $OUT/ab-sampling.log
  echo "sampling $lab: $((SECONDS - t0)) s"
}
mkdir -p /tmp/ab
for r in 1 2; do
  rows new$r X=1; rows base$r JAXNORM_TEMP_NO_LN_HELD=1 JAXNORM_TEMP_NO_LN_STAGED=1
  samp s0r$r X=1; samp s3r$r JAXNORM_TEMP_SAMPLER_AB=3
  [ $SECONDS -gt 430 ] && break
done
[ $SECONDS -lt 470 ] && { samp s1r1 JAXNORM_TEMP_SAMPLER_AB=1; samp s2r1 JAXNORM_TEMP_SAMPLER_AB=2; }
python3 benchmarks/ab_rows.py --compare $OUT/ab.log base new | tee $OUT/ab-rows.txt
python3 benchmarks/ab_sampling.py --compare /tmp/ab s0 s3 s1 s2 | tee $OUT/ab-sampling.txt
grep -c "CHECK FAILED" $OUT/ab-sampling.log
rm -f $OUT/rows-*.json
echo "total $SECONDS s"
