# Call 4 (after call 3, gpu_run.sh's build and whole suite, on the warm machine): the residual-add
# backward's kernel times on the committed build (ab_norm_bwd.py's addnorm_narrow set, the cases
# call 2 timed as m0 and m3), then bench_add_norm.py at 1024-4096 columns (fused, the unfused pair,
# jnp), bf16 both norms, float16 RMSNorm.
#   COMMIT=<hash> bash benchmarks/results/h200-one-pack-addnorm/call4-bench.sh
set -o pipefail
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; echo "${COMMIT:-unknown}" > "$OUT/commit.txt"
python3 -c "import jaxnorm._ffi as f; assert f.cuda_built()" 2>/dev/null || source benchmarks/gpu_setup.sh
timeout 90 python3 benchmarks/ab_norm_bwd.py main /tmp/ab addnorm_narrow 2>&1 | grep -v Warn | tail -n 12 | tee "$OUT/ab.log"
timeout 200 python3 benchmarks/bench_add_norm.py --shapes 32768x1024,16384x2048,8192x4096 --out "$OUT/bf16" 2>&1 |
  tail -n 14 | tee "$OUT/bench-bf16.log"
timeout 100 python3 benchmarks/bench_add_norm.py --shapes 32768x1024,8192x4096 --norms rms_norm --dtype float16 \
  --out "$OUT/f16" 2>&1 | tail -n 8 | tee "$OUT/bench-f16.log"
echo "total $SECONDS s"
