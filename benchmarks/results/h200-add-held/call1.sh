# Call 1 of h200-add-held: one build (this tree, TEMP switch JAXNORM_TEMP_NO_ADDALONE=1: the
# residual-add forward's 4-pack tiles as on main), the residual-add tests, then the residual-add
# forwards at 2048-16384 columns and fwd+bwd cells, new / old twice (ab_norm_bwd.sh).
#   COMMIT=<hash> bash benchmarks/results/h200-add-held/call1.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
OLD="JAXNORM_TEMP_NO_ADDALONE=1" TEST_TIMEOUT=150 AB_UNTIL=470 TESTS="tests/test_add_norm.py" \
  ROWS="2048,3072,4096,6144,8192,12288,16384 bfloat16,float16 add_layer_norm,add_rms_norm" \
  ROWS2="4096,9000,16384,2200x16384 bfloat16 add_layer_norm+bwd,add_rms_norm+bwd,add_layer_norm" \
  bash benchmarks/ab_norm_bwd.sh
