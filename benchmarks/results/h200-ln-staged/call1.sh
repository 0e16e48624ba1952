# Call 1 of h200-ln-staged: this tree built into /tmp/m1 (its .so copied into the tree, which
# every step imports); the norm tests as main runs them, and the wide-row ones with each side of
# the TEMP switch; the 16-bit LayerNorm forward's cluster tiles three ways, two rounds
# (JAXNORM_TEMP_LN_STAGED unset: main's one-shot 256 x 8 tiles and the 512 x 8 CTA at 32768;
# 1: 512 x 4 tiles staged, scale and bias in shared memory; regs: the same with the bias in
# registers); then Nsight Compute on the 16-bit norm backward at 9000 against 16384 columns and
# on the LayerNorm forward at 262144 both ways.
#   COMMIT=<hash> bash benchmarks/results/h200-ln-staged/call1.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
BUILD_INTO=/tmp/m1 source "$(dirname "$0")/../../gpu_setup.sh"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
W="many_wide_rows or memory_efficient_wide or many_rows_wide_tiles"
timeout 130 python3 -m pytest -q -n 14 -p no:cacheprovider -p no:benchmark tests/test_norm.py > $OUT/pytest-main.log 2>&1
echo "main: $(tail -n 1 $OUT/pytest-main.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-main.log | head
for m in 1 regs; do
  JAXNORM_TEMP_LN_STAGED=$m timeout 60 python3 -m pytest -q -n 14 -p no:cacheprovider -p no:benchmark tests/test_norm.py \
    -k "$W" > $OUT/pytest-$m.log 2>&1
  echo "switch $m: $(tail -n 1 $OUT/pytest-$m.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-$m.log | head
done
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8; mkdir -p /tmp/ab
SET="32768,65536,131072,262144,64x262144,1024x131072 bfloat16 layer_norm,layer_norm+bwd"
for i in 1 2; do for m in main staged regs; do
  [ $SECONDS -gt 400 ] && { echo "skip $m$i"; continue; }
  if [ $m = main ]; then e=X=1; elif [ $m = staged ]; then e=JAXNORM_TEMP_LN_STAGED=1; else e=JAXNORM_TEMP_LN_STAGED=regs; fi
  env $e OUT=/tmp/ab timeout 60 python3 benchmarks/ab_rows.py $m$i $SET 2>&1 | grep -v Warn >> $OUT/ab.log
done; done
python3 benchmarks/ab_rows.py --compare $OUT/ab.log main staged regs | tee $OUT/ab-summary.txt
echo "ab done $SECONDS s"
DETAIL=1 CALLS=1 UNTIL=$((500 - SECONDS)) CELLS="rms_norm:fwd+bwd:14913x9000:bfloat16 rms_norm:fwd+bwd:8192x16384:bfloat16
  layer_norm:fwd+bwd:14913x9000:bfloat16 layer_norm:fwd:512x262144:bfloat16" bash benchmarks/ncu_cells.sh
[ $SECONDS -lt 540 ] && JAXNORM_TEMP_LN_STAGED=1 OUT=$OUT/staged DETAIL=1 CALLS=1 \
  CELLS="layer_norm:fwd:512x262144:bfloat16" bash benchmarks/ncu_cells.sh
echo "total $SECONDS s"
