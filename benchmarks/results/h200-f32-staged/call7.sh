# Call 7 of h200-f32-staged (a fresh machine; carry abtree/, the base tree 43eab87): 16-bit RMSNorm's
# cluster tiles as 512 threads x 4 packs (one CTA an SM, as float32's 512-thread staged tiles that
# reached 4.0 TB/s), staged at every cluster size, against 43eab87's one-shot 256x8 tiles (staged
# only in clusters of 16). Both trees built, the norm tests on the new one, the bf16 RMSNorm
# forwards two rounds a side. As run (7138e5e's copy of this file) it held its own copy of
# ab_two_builds.sh's steps and ran the tests last, in what the device time left.
# From the repository root: COMMIT=<hash> BASE=<hash> bash benchmarks/results/h200-f32-staged/call7.sh
TESTS="$PWD/tests/test_norm.py" TEST_TIMEOUT=60 AB_UNTIL=290 \
  ROWS="32768,65536,131072,262144,16384,64x262144 bfloat16 rms_norm" bash benchmarks/ab_two_builds.sh
