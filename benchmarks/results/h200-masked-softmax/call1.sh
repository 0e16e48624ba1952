# Call 1 of h200-masked-softmax: two builds (m0: 1106efe, main, the mask a runtime pointer, in
# abtree/; m1: this tree, the mask's presence a compile-time flag and every pack's x and mask
# loaded before any is applied), the softmax, cross-entropy and residual-add tests on m1, then the
# masked and plain softmax forwards m0 m1 m1 m0 (ab_two_builds.sh).
#   COMMIT=<hash> bash benchmarks/results/h200-masked-softmax/call1.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
R=$PWD
BASE=1106efe TEST_TIMEOUT=110 AB_UNTIL=530 \
  TESTS="$R/tests/test_softmax.py $R/tests/test_cross_entropy.py $R/tests/test_add_norm.py $R/tests/test_ffi_targets.py" \
  ROWS="1024,4096,12288,65536 bfloat16 masked_softmax,softmax" \
  ROWS2="2048,16384 bfloat16 masked_log_softmax,masked_softmax+bwd" \
  ROWS3="1024,8192 float32,float16 masked_softmax" \
  bash benchmarks/ab_two_builds.sh
