# Call 2 of h200-l2-prefetch (call 1's machine if still warm: its m0 build is kept): three trees,
# two rounds each, no tests. m0: abtree/ = 2a8d4f8 (main); m1: this tree = M3 alone (the plain
# 16-bit RMSNorm backward's 256x2 CTAs at 3 an SM, 80 registers, prefetch as main); m2: abtree2/ =
# M4 (4 an SM, 64 registers, 72 bytes spilled).
#   COMMIT=<hash> BASE=2a8d4f8 bash benchmarks/results/h200-l2-prefetch/call2.sh
REUSE_M0=1 TEST_TIMEOUT=0 AB_UNTIL=540 ROWS="1024,2048,4096,16384x1024,4096x1024 bfloat16 rms_norm+bwd" \
  ROWS2="1024,4096 float16 rms_norm+bwd" \
  ROWS3="1024 bfloat16 layer_norm+bwd" bash benchmarks/ab_two_builds.sh
