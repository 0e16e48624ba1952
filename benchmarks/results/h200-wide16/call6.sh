# Call 6 of h200-wide16 (a fresh machine; carry abtree/ = a31cd6f): both trees built, the norm
# tests on the new one, then two rounds a side of lead G (the warp-row backward tile after QuACK's
# 1024-column recipe, warp_staged_bwd, and 1024 columns taking it) and lead I (the float32 norm
# forwards' rows wider than one 512 x 4 CTA in 512 x 8 tiles, wide_first: one CTA to 16384
# columns, clusters of 2 / 4 / 8 at 32768 / 65536 / 131072, staged).
#   COMMIT=<hash> BASE=a31cd6f bash benchmarks/results/h200-wide16/call6.sh
R=$PWD/tests
TESTS="$R/test_norm.py $R/test_add_norm.py" TEST_TIMEOUT=200 \
  AB_UNTIL=550 ROWS="1024,896,640,16384x1024 bfloat16 rms_norm+bwd" \
  ROWS2="16384,32768,65536,131072 float32 rms_norm,layer_norm" ROWS3="1024 float16 rms_norm+bwd" bash benchmarks/ab_two_builds.sh
