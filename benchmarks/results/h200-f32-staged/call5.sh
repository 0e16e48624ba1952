# Call 5 of h200-f32-staged (a fresh machine; carry abtree/, the base tree 89eeb2d): 535299a's
# float32 LayerNorm at 262144 columns ran staged with one row buffer (0.87-0.94x); here it holds
# its scale alone beside two. Both trees built, the norm tests on the new one, the float32 norm
# forwards (and forward+backward at 262144) two rounds a side. As run (43eab87's copy of this
# file) it held its own copy of ab_two_builds.sh's steps.
# From the repository root: COMMIT=<hash> BASE=<hash> bash benchmarks/results/h200-f32-staged/call5.sh
R=$PWD/tests
TESTS="$R/test_norm.py $R/test_add_norm.py $R/test_ops.py::test_cluster_workers_take_many_rows" TEST_TIMEOUT=200 \
  AB_UNTIL=520 ROWS="262144,64x262144 float32 layer_norm,layer_norm+bwd" \
  ROWS2="16384,65536,131072,262144 float32 rms_norm,layer_norm" bash benchmarks/ab_two_builds.sh
