# Prepared for a GPU call (none was lent in the session that wrote it): two builds, m0 main in
# abtree/ (the mask a runtime pointer), m1 this tree with masked-softmax-loads-first.patch applied
# and committed (the mask's presence a compile-time flag, every pack's x and mask loaded before
# any is applied); the softmax, cross-entropy and residual-add tests on m1; then the masked and
# plain softmax forwards m0 m1 m1 m0 (ab_two_builds.sh). Before the call:
#   git apply benchmarks/results/next-rows/masked-softmax-loads-first.patch && git commit -am ...
#   rm -rf abtree && mkdir abtree && git archive <main> ffi_src jaxnorm CMakeLists.txt pyproject.toml README.md | tar -x -C abtree
#   COMMIT=<hash> BASE=<main> bash benchmarks/results/next-rows/masked-softmax-call1.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
R=$PWD
BASE=${BASE:?the base commit} TEST_TIMEOUT=110 AB_UNTIL=530 \
  TESTS="$R/tests/test_softmax.py $R/tests/test_cross_entropy.py $R/tests/test_add_norm.py $R/tests/test_ffi_targets.py" \
  ROWS="1024,4096,12288,65536 bfloat16 masked_softmax,softmax" \
  ROWS2="2048,16384 bfloat16 masked_log_softmax,masked_softmax+bwd" \
  ROWS3="1024,8192 float32,float16 masked_softmax" \
  bash benchmarks/ab_two_builds.sh
