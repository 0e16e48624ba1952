# Call 1 of h200-1024bwd (a fresh machine; carry abtree/ = 05cbbcd, see ../../ab_two_builds.sh): both
# trees built, the norm tests on the new one, then two rounds a side of lead J (the 16-bit RMSNorm
# backward at 904-1024 columns in QuACK 0.6.5's tile: 128 threads of one pack a row, one row a
# 128-thread CTA, 8 CTAs an SM, staged; partials cap 512 -> 1184), with controls the partials cap
# reaches (128, 2048 columns; LayerNorm at 1024); and lead L (16-bit LayerNorm's forward clusters
# as 16-bit RMSNorm's: 512 threads of 4 packs, staged, both parameters held), 64 rows its few-row
# case.
#   COMMIT=<hash> BASE=05cbbcd bash benchmarks/results/h200-1024bwd/call1.sh
R=$PWD/tests
TESTS="$R/test_norm.py $R/test_add_norm.py" TEST_TIMEOUT=200 \
  AB_UNTIL=550 ROWS="1024,1000,904,16384x1024 bfloat16 rms_norm+bwd" \
  ROWS2="1024,128,2048 float16 rms_norm+bwd,layer_norm+bwd" \
  ROWS3="65536,131072,262144,64x262144 bfloat16 layer_norm" bash benchmarks/ab_two_builds.sh
