# Call 5 of h200-half-wide: two builds (m0: c518014, main with the 128-thread residual-add forward
# tiles at eight CTAs, in abtree/; m1: this tree, the 64- and 256-thread 4-pack tiles bounded at 64
# registers too), the residual-add tests on m1, the residual-add forwards at 1025-8192 columns and
# four fwd+bwd cells, m0 m1 m1 m0 (ab_two_builds.sh).
#   COMMIT=<hash> bash benchmarks/results/h200-half-wide/call5.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
R=$PWD
BASE=c518014 TEST_TIMEOUT=60 AB_UNTIL=300 TESTS="$R/tests/test_add_norm.py" \
  ROWS="2048,6144,8192,16384 bfloat16,float16 add_rms_norm,add_layer_norm" \
  ROWS2="2048,8192 bfloat16 add_rms_norm+bwd,add_layer_norm+bwd" \
  bash benchmarks/ab_two_builds.sh
