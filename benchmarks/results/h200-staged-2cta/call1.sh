# One build, A/B by the TEMP switch JAXNORM_TEMP_STAGED read at each call (row_runners.cuh):
#   0 main: 16-bit RMSNorm's forward clusters of 16 staged (one CTA an SM, two stages, the scale
#     held), every other 16-bit norm cluster tile one-shot;
#   1 both 16-bit norms' forward clusters of 16 staged at two CTAs an SM, one stage, the scale held
#     (LayerNorm's bias read from global memory);
#   2 as 1 at every cluster size (32768-262144 bf16 columns).
# First the norm tests with mode 2 (every new kernel), then the A/B, then Nsight Compute's launch
# statistics of the clusters-of-16 kernels (the active clusters).
# Run from the repository root: COMMIT=<hash> bash benchmarks/results/h200-staged-2cta/call1.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a $OUT/log.txt) 2>&1
echo "commit $COMMIT"
source benchmarks/gpu_setup.sh
bash benchmarks/build_profile.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
t0=$SECONDS
JAXNORM_TEMP_STAGED=2 timeout 120 python3 -m pytest -q -n 16 -p no:benchmark tests/test_norm.py tests/test_transforms.py > $OUT/pytest.log 2>&1
tail -n 1 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -10; echo "norm tests (mode 2) $((SECONDS - t0)) s"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.5
rows() {  # label, env...
  local lab=$1; shift; local t0=$SECONDS
  env "$@" timeout 75 python3 benchmarks/ab_rows.py $lab 32768,65536,131072,262144,16x262144,64x131072 bfloat16 \
    rms_norm,layer_norm 2>&1 | grep "^\[" >> $OUT/ab.log
  echo "rows $lab: $((SECONDS - t0)) s"
}
for r in 1 2; do
  rows m0r$r JAXNORM_TEMP_STAGED=0; rows m1r$r JAXNORM_TEMP_STAGED=1; rows m2r$r JAXNORM_TEMP_STAGED=2
  [ $SECONDS -gt 380 ] && break
done
# The forward+backward and float16 at 262144, one round each
for m in 0 1; do
  JAXNORM_TEMP_STAGED=$m timeout 50 python3 benchmarks/ab_rows.py m${m}x 262144 float16 rms_norm,layer_norm 2>&1 | grep "^\[" >> $OUT/ab.log
  [ $SECONDS -lt 470 ] && JAXNORM_TEMP_STAGED=$m timeout 50 python3 benchmarks/ab_rows.py m${m}x 262144 bfloat16 rms_norm+bwd,layer_norm+bwd 2>&1 | grep "^\[" >> $OUT/ab.log
done
python3 benchmarks/ab_rows.py --compare $OUT/ab.log m0 m1 m2 | tee $OUT/ab-rows.txt
rm -f $OUT/rows-*.json
if [ $SECONDS -lt 500 ]; then
  cat > /tmp/one.py <<'PY'
import jax, jax.numpy as jnp, jaxnorm
x = jax.random.normal(jax.random.key(0), (512, 262144), jnp.float32).astype(jnp.bfloat16)
s = jnp.ones((262144,), jnp.float32); b = jnp.zeros((262144,), jnp.float32)
jax.block_until_ready(jax.jit(jaxnorm.rms_norm)(x, s)); jax.block_until_ready(jax.jit(jaxnorm.layer_norm)(x, s, b))
PY
  for m in 0 1; do
    JAXNORM_TEMP_STAGED=$m timeout 60 ncu --kernel-name regex:"staged|tile_fwd" --section LaunchStats --section Occupancy \
      --section SpeedOfLight --clock-control none python3 /tmp/one.py > $OUT/ncu-m$m.txt 2>&1
    grep -E "staged_fwd|tile_fwd|Duration|DRAM Throughput|L2 Cache Throughput|Max Active Clusters|Registers Per|Grid Size" $OUT/ncu-m$m.txt | head -24
  done
fi
echo "total $SECONDS s"
