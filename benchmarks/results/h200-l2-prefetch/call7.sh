# Call 7 of h200-l2-prefetch (a fresh machine): two builds, the norm tests on the new one, two
# rounds a side. m0: abtree/ = b38bad1 (M3: the plain 16-bit RMSNorm backward's 256x2 tiles 3 an
# SM, 80 registers); m1: this tree = D4: those tiles in the default mode take the op with constant
# flags (64 registers, no spills) at 4 an SM, and the partials cap 592 for rows of 513-4096 columns.
#   COMMIT=<hash> BASE=b38bad1 bash benchmarks/results/h200-l2-prefetch/call7.sh
R=$PWD/tests
TESTS="$R/test_norm.py $R/test_add_norm.py" TEST_TIMEOUT=120 AB_UNTIL=390 \
  ROWS="1024,2048,4096,16384x1024,4096x1024 bfloat16 rms_norm+bwd" \
  ROWS2="1024,4096 float16 rms_norm+bwd,layer_norm+bwd" bash benchmarks/ab_two_builds.sh
