# Call 6 of h200-wide16 (a fresh machine; carry abtree/ = a31cd6f): both trees built, the norm
# tests on the new one, then two rounds a side of lead G (the warp-row backward tile after QuACK's
# 1024-column recipe, warp_regs_bwd, and 1024 columns taking it), LayerNorm (64-thread rows) and
# 2048 columns as controls.
#   COMMIT=<hash> BASE=a31cd6f bash benchmarks/results/h200-wide16/call6.sh
R=$PWD/tests
TESTS="$R/test_norm.py $R/test_add_norm.py" TEST_TIMEOUT=200 \
  AB_UNTIL=545 ROWS="1024,896,640,16384x1024 bfloat16 rms_norm+bwd" \
  ROWS2="1024,768 float16 rms_norm+bwd" ROWS3="1024,2048 bfloat16 layer_norm+bwd,rms_norm" bash benchmarks/ab_two_builds.sh
