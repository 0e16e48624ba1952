# Call 1 of h200-f32-bwd (a fresh machine; carry .whl and abtree/, the base tree c10cbf0: see
# ../../ab_two_builds.sh): QuACK's small wheels and first cu13 part kept in /tmp for calls 2-3, then
# both trees built, the norm tests on the new one, then two rounds a side of the float32 norms'
# forward+backward at 262144 (lead A: the held-scale backward) and forwards at 16384-131072 (lead B:
# 512x4 staged clusters). From the repository root:
#   COMMIT=<hash> BASE=<hash> bash benchmarks/results/h200-f32-bwd/call1.sh
mkdir -p /tmp/quack-whl; cp .whl/*.whl /tmp/quack-whl/; cp .whl/cu13.txz.part00 .whl/cu13.txz.nparts /tmp/
R=$PWD/tests
TESTS="$R/test_norm.py $R/test_add_norm.py $R/test_ops.py::test_cluster_workers_take_many_rows" TEST_TIMEOUT=200 \
  AB_UNTIL=540 ROWS="262144,64x262144 float32 rms_norm+bwd,layer_norm+bwd" \
  ROWS2="16384,32768,65536,131072 float32 rms_norm,layer_norm" bash benchmarks/ab_two_builds.sh
