# Call 1 of h200-l2-prefetch (a fresh machine): three builds, two rounds each, no tests.
#   m0: abtree/ = 2a8d4f8 (main);  m2: abtree2/ = P, the 16-bit norm backward's L2 prefetch only from
#   512-thread rows (as float32's);  m1: this tree = P + M3, the plain 16-bit RMSNorm backward's
#   256-thread CTAs of 2 packs at 3 an SM (80 registers, no spills) instead of 2 (92).
#   COMMIT=<hash> BASE=2a8d4f8 bash benchmarks/results/h200-l2-prefetch/call1.sh
TEST_TIMEOUT=0 AB_UNTIL=540 ROWS="256,1024,2048,4096,16384x1024 bfloat16 rms_norm+bwd" \
  ROWS2="1024,4096 float16 rms_norm+bwd,layer_norm+bwd" \
  ROWS3="256,1024,4096,8192 bfloat16 layer_norm+bwd" bash benchmarks/ab_two_builds.sh
