# Call 4 of h200-add-held: two builds (m0: 309dc5d, the held 8-pack tiles at 80 registers, x and r
# two packs at a time, in abtree/; m1: this tree, the same tiles at 128 registers with every
# pack's loads at once, float16 LayerNorm's to 16384 too), test_add_norm.py on m1, the residual-add
# forwards m0 m1 m1 m0 (ab_two_builds.sh).
#   COMMIT=<hash> bash benchmarks/results/h200-add-held/call4.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
R=$PWD
BASE=309dc5d TEST_TIMEOUT=100 AB_UNTIL=470 TESTS="$R/tests/test_add_norm.py" \
  ROWS="3072,4096,6144,8192,9000,12288,16384 bfloat16,float16 add_layer_norm,add_rms_norm" \
  ROWS2="4096x16384,8192x4096,16384x8192 bfloat16 add_layer_norm,add_rms_norm,add_layer_norm+bwd" \
  bash benchmarks/ab_two_builds.sh
