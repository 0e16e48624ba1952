# Call 2 of h200-ln-staged: this tree built into /tmp/m1 (its .so copied into the tree); the
# residual-add norm tests with the new default (the residual-add backward's 256 x 2 tiles take the
# fixed-flag op, 3 CTAs an SM) and its many-row ones with the 2-an-SM variant; the residual-add
# LayerNorm backward three ways, two rounds (JAXNORM_TEMP_ADDFIX=no: main's runtime-flag op;
# unset: fixed flags, 3 an SM; 2: fixed flags, 2 an SM); then Nsight Compute's stall and memory
# sections on the 16-bit norm backward at 9000 against 16384 columns, tarred (8 files come back).
#   COMMIT=<hash> bash benchmarks/results/h200-ln-staged/call2.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
BUILD_INTO=/tmp/m1 source "$(dirname "$0")/../../gpu_setup.sh"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 120 python3 -m pytest -q -n 14 -p no:cacheprovider -p no:benchmark tests/test_add_norm.py > $OUT/pytest-add.log 2>&1
echo "add_norm: $(tail -n 1 $OUT/pytest-add.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-add.log | head
JAXNORM_TEMP_ADDFIX=2 timeout 60 python3 -m pytest -q -n 14 -p no:cacheprovider -p no:benchmark tests/test_add_norm.py \
  -k "many_rows or reproducible" > $OUT/pytest-add2.log 2>&1
echo "add_norm, switch 2: $(tail -n 1 $OUT/pytest-add2.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-add2.log | head
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8; mkdir -p /tmp/ab
for i in 1 2; do for m in main fix3 fix2; do
  [ $SECONDS -gt 430 ] && { echo "skip $m$i"; continue; }
  if [ $m = main ]; then e=JAXNORM_TEMP_ADDFIX=no; elif [ $m = fix3 ]; then e=X=1; else e=JAXNORM_TEMP_ADDFIX=2; fi
  env $e timeout 80 python3 benchmarks/ab_norm_bwd.py $m$i /tmp/ab addnorm_fixed 2>&1 | grep -v Warn >> $OUT/ab.log
done; done
{ python3 benchmarks/ab_norm_bwd.py --compare /tmp/ab main fix3; python3 benchmarks/ab_norm_bwd.py --compare /tmp/ab main fix2; } \
  | tee $OUT/ab-summary.txt
echo "ab done $SECONDS s"
if [ $SECONDS -lt 480 ]; then
  OUT=/tmp/ncu DETAIL=1 CALLS=1 UNTIL=$((560 - SECONDS)) CELLS="rms_norm:fwd+bwd:14913x9000:bfloat16
    rms_norm:fwd+bwd:8192x16384:bfloat16 layer_norm:fwd+bwd:14913x9000:bfloat16" bash benchmarks/ncu_cells.sh
  cp /tmp/ncu/ncu-cells.md $OUT/; tar -C /tmp/ncu -czf $OUT/ncu-detail.tgz ncu-cells
fi
echo "total $SECONDS s"
