# Call 5 of h200-add-held: the taken commit (call 4's m1 kernels: the same SASS, compiled here) built,
# then bench_add_norm.py, bf16, the shapes of call 3 (the budget left no room for the tests, which
# passed on call 4's m1 build, 138).
#   COMMIT=<hash> bash benchmarks/results/h200-add-held/call5.sh
TESTS=0 BENCH_TIMEOUT=160 BENCH_ARGS="--shapes 32768x1024,8192x4096,16384x8192,4096x16384" \
  bash "$(dirname "$0")/../../gpu_add_norm.sh"
