# Prepared for the next session (branch exp/bwd-lean, not main): one GPU call, one build, the TEMP
# switch JAXNORM_TEMP_LEAN (unset or 0: main's backward arithmetic; 1: the lean terms, norm_ops.cuh).
#   1. The norm tests with the lean terms (every norm backward path in the default mode).
#   2. ab_norm_bwd.py's `lean` set, two rounds a side, outputs checked and run twice for the bits.
# Run from the repository root on the branch:
#   COMMIT=<hash> bash benchmarks/results/next-rows/lean-call.sh
source benchmarks/gpu_setup.sh
JAXNORM_TEMP_LEAN=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 150 \
  python3 -m pytest -q -n 16 -p no:cacheprovider -p no:benchmark tests/test_norm.py tests/test_add_norm.py \
  tests/test_transforms.py tests/test_forward_mode.py 2>&1 | tee $OUT/pytest-lean.log | tail -4
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
run() { local lab=$1; shift; [ $SECONDS -gt 540 ] && { echo "skip $lab"; return; }
  env "$@" timeout 100 python3 benchmarks/ab_norm_bwd.py $lab /tmp/ab lean 2>&1 | grep -v Warn | tail -n 14 >> $OUT/ab.log; }
for i in 1 2; do run m0r$i JAXNORM_TEMP_LEAN=0; run m1r$i JAXNORM_TEMP_LEAN=1; done
grep "NOT REPRODUCIBLE" $OUT/ab.log
python3 benchmarks/ab_norm_bwd.py --compare /tmp/ab m0 m1 | tee $OUT/ab-summary.txt
echo "total $SECONDS s"
