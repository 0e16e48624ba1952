# Call 1 of h200-half-wide: this tree (B9 with its TEMP switch) built into /tmp/m1; the norm tests
# at the widths B9 changes; the A/B of the 16-bit norm backward at 9000-16384 columns
# (JAXNORM_TEMP_NO_HALFWIDE=1: main's one 512 x 4 CTA an SM), two rounds a side; then Nsight
# Compute's stall and memory sections on the residual-add forwards against the plain ones at
# 32768 x 1024 bf16 (where the residual-add forward is at 80-87% of the copy), tarred.
#   COMMIT=<hash> bash benchmarks/results/h200-half-wide/call1.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
BUILD_INTO=/tmp/m1 source "$(dirname "$0")/../../gpu_setup.sh"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 150 python3 -m pytest -q -n 14 -p no:cacheprovider -p no:benchmark tests/test_norm.py \
  -k "wide or partial_warp or memory_efficient or reproduc or many_rows" > $OUT/pytest-norm.log 2>&1
echo "norm (B9 widths): $(tail -n 1 $OUT/pytest-norm.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-norm.log | head
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8; mkdir -p /tmp/ab
for i in 1 2; do for m in new old; do
  [ $SECONDS -gt 430 ] && { echo "skip $m$i"; continue; }
  if [ $m = old ]; then e=JAXNORM_TEMP_NO_HALFWIDE=1; else e=X=1; fi
  env $e OUT=/tmp/ab timeout 100 python3 benchmarks/ab_rows.py $m$i "9000,10240,12288,16384,64x9000" bfloat16,float16 \
    rms_norm+bwd,layer_norm+bwd 2>&1 | grep -v Warn >> $OUT/ab.log
done; done
python3 benchmarks/ab_rows.py --compare $OUT/ab.log old new | tee $OUT/ab-summary.txt
echo "ab done $SECONDS s"
if [ $SECONDS -lt 470 ]; then
  OUT=/tmp/ncu DETAIL=1 CALLS=1 UNTIL=$((560 - SECONDS)) CELLS="add_rms_norm:fwd:32768x1024:bfloat16
    rms_norm:fwd:32768x1024:bfloat16 add_layer_norm:fwd:32768x1024:bfloat16 layer_norm:fwd:32768x1024:bfloat16" \
    bash benchmarks/ncu_cells.sh
  cp /tmp/ncu/ncu-cells.md $OUT/; tar -C /tmp/ncu -czf $OUT/ncu-detail.tgz ncu-cells
fi
echo "total $SECONDS s"
