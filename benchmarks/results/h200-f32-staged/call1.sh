# Call 1 of h200-f32-staged (carry .whl and abtree/, the base tree 89eeb2d: see ../../ab_two_builds.sh):
# QuACK's small wheels and first cu13 part kept in /tmp for calls 2-3, then both trees built, the
# norm tests on the new one, the float32 norm forwards two rounds a side, and bf16 RMSNorm at 262144
# once. As run (535299a's copy of this file) it held its own copy of ab_two_builds.sh's steps.
# From the repository root: COMMIT=<hash> BASE=<hash> bash benchmarks/results/h200-f32-staged/call1.sh
mkdir -p /tmp/quack-whl; cp .whl/*.whl /tmp/quack-whl/; cp .whl/cu13.txz.part00 .whl/cu13.txz.nparts /tmp/
TESTS="$PWD/tests/test_norm.py $PWD/tests/test_ops.py::test_cluster_workers_take_many_rows" TEST_TIMEOUT=200 AB_UNTIL=500 \
  ROWS="16384,32768,65536,131072,262144,4096,64x262144,16x131072 float32 rms_norm,layer_norm" \
  ROWS2="262144 bfloat16 rms_norm" bash benchmarks/ab_two_builds.sh
