# Prepared for a GPU call (none was lent in the session that wrote it, 2026-12-04): two builds,
# m0 main in abtree/, m1 this tree with loads-first-held-packs.patch applied and committed (the
# masked softmax forward's mask a compile-time flag, every pack's x and mask loaded before any is
# applied; the residual-add backward's h cotangent held as 32-bit words, so its packs' loads go
# out together; the residual-add forward's 4-pack tiles loading every pack's x and r first, at
# 80 registers; the masked softmax backward's mask loaded beside y and dy); the softmax, residual-add and cross-entropy tests on m1; then the masked
# and plain softmax forwards and the residual-add forwards and fwd+bwd, m0 m1 m1 m0
# (ab_two_builds.sh), about 560 s on a warm start. The forward-only residual-add cells isolate
# the forward's change, the masked softmax cells the softmax's; fwd+bwd less the forward gives
# the backward's. A second call (REUSE_M0=1 keeps the base's build) can time what AB_UNTIL skipped.
# Before the call:
#   git apply benchmarks/results/next-rows/loads-first-held-packs.patch && git commit -am ...
#   rm -rf abtree && mkdir abtree && git archive <main> ffi_src jaxnorm CMakeLists.txt pyproject.toml README.md | tar -x -C abtree
#   COMMIT=<hash> BASE=<main> bash benchmarks/results/next-rows/loads-first-held-packs-call.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
R=$PWD
BASE=${BASE:?the base commit} TEST_TIMEOUT=100 AB_UNTIL=540 \
  TESTS="$R/tests/test_softmax.py $R/tests/test_add_norm.py $R/tests/test_cross_entropy.py" \
  ROWS="1024,2048,16384,32768 bfloat16 add_layer_norm,add_rms_norm+bwd,add_layer_norm+bwd" \
  ROWS2="1024,4096,12288,65536 bfloat16 masked_softmax,softmax,masked_softmax+bwd" \
  ROWS3="2048,16384 float32,float16 masked_softmax" \
  bash benchmarks/ab_two_builds.sh
