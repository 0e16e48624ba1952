# Call 3 of h200-bias-alone (a fresh machine; carry .whl and abtree/ = 0680809): as call 1, on the
# commit that keeps wide_alone to launches of at least two rows an SM (fwd_launch_tile): float32
# RMSNorm forward at 16384 across the row counts around that threshold, and lead D again.
#   COMMIT=<hash> BASE=0680809 bash benchmarks/results/h200-bias-alone/call3.sh
mkdir -p /tmp/quack-whl; cp .whl/*.whl /tmp/quack-whl/; cp .whl/cu13.txz.part00 .whl/cu13.txz.nparts /tmp/
R=$PWD/tests
TESTS="$R/test_norm.py $R/test_add_norm.py $R/test_ops.py::test_cluster_workers_take_many_rows" TEST_TIMEOUT=200 \
  AB_UNTIL=540 ROWS="64x16384,200x16384,264x16384,512x16384,1024x16384,16384 float32 rms_norm" \
  ROWS2="262144,128x262144 float32 layer_norm,layer_norm+bwd" ROWS3="32768,65536,131072 float32 layer_norm" bash benchmarks/ab_two_builds.sh
