# Call 1 of h200-wide16 (a fresh machine; carry abtree/ = fad4efc, see ../../ab_two_builds.sh): both
# trees built, the norm tests on the new one, then two rounds a side of lead E (16-bit norms at
# 16392-32768 columns in one 512x8 CTA a row) and lead F (16-bit LayerNorm's clusters of 8 and 16
# staged), with widths and row counts that neither changes as controls (65536; 1024 rows).
#   COMMIT=<hash> BASE=fad4efc bash benchmarks/results/h200-wide16/call1.sh
R=$PWD/tests
TESTS="$R/test_norm.py $R/test_add_norm.py $R/test_ops.py::test_cluster_workers_take_many_rows" TEST_TIMEOUT=200 \
  AB_UNTIL=545 ROWS="32768,24576,65536,1024x32768 bfloat16 rms_norm,layer_norm" \
  ROWS2="262144,131072,64x262144 bfloat16 layer_norm" ROWS3="32768,262144 float16 rms_norm,layer_norm" bash benchmarks/ab_two_builds.sh
