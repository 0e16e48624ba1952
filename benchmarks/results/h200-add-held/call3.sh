# Call 3 of h200-add-held (on the machine call 2 left warm, its build in /tmp/m1): bench_add_norm.py
# on the taken commit, bf16, the shapes of h200-half-wide's call 4 (fused, the unfused pair, the
# jnp form).
#   COMMIT=<hash> bash benchmarks/results/h200-add-held/call3.sh
cp /tmp/m1/jaxnorm/_jaxnorm_*.so jaxnorm/ && export PYTHONPATH=$PWD
BUILD=0 TESTS=0 BENCH_TIMEOUT=230 BENCH_ARGS="--shapes 32768x1024,8192x4096,16384x8192,4096x16384" \
  bash benchmarks/gpu_add_norm.sh
