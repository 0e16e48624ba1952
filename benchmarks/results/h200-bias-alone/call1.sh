# Call 1 of h200-bias-alone (a fresh machine; carry .whl and abtree/, the base tree 0680809: see
# ../../ab_two_builds.sh): QuACK's small wheels and first cu13 part kept in /tmp for calls 2-3, both
# trees built, the norm tests on the new one, then two rounds a side of lead D (float32 LayerNorm at
# 262144, its bias in registers) and lead B (float32 RMSNorm forward at 16384 in one 512x8 CTA a row).
#   COMMIT=<hash> BASE=<hash> bash benchmarks/results/h200-bias-alone/call1.sh
mkdir -p /tmp/quack-whl; cp .whl/*.whl /tmp/quack-whl/; cp .whl/cu13.txz.part00 .whl/cu13.txz.nparts /tmp/
R=$PWD/tests
TESTS="$R/test_norm.py $R/test_add_norm.py $R/test_ops.py::test_cluster_workers_take_many_rows" TEST_TIMEOUT=200 \
  AB_UNTIL=540 ROWS="262144,64x262144 float32 layer_norm,layer_norm+bwd" \
  ROWS2="16384,64x16384,8x16384,12288,32768 float32 rms_norm" bash benchmarks/ab_two_builds.sh
