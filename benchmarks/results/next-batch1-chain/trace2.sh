# Prepared, not run: the batch-1 row's clock trace again, with finer points where the 2026-11-29
# trace (../h200-stage-x-hist-push/) left 3 µs unexplained (delegate floor, the histogram's
# zeroing, its pass and its pushes; the gather's count and loop; CTA 0's padding and rank sort).
# trace2.patch applies to main alone or on top of params-loads.patch and rank-sort.patch; apply it
# on the device tree (never merge it), then from the repository root:
#   patch -p1 < benchmarks/results/next-batch1-chain/trace2.patch && COMMIT=<hash> bash benchmarks/results/next-batch1-chain/trace2.sh
# Builds (incrementally if the tree was built), then traces warm calls; cycles at the SM clock printed.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader
tr() { timeout 40 python3 - "$@" <<'PY' 2>&1 | grep -E "^trace|Error|error" >> $OUT/trace2.log
import sys, numpy as np, jax, jaxnorm
which, b, v, dt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
kw = {"top_k": dict(top_k=50), "top_k_top_p": dict(top_k=50, top_p=0.9)}[which]
x = jax.device_put(3 * np.random.default_rng(0).standard_normal((b, v), np.float32)).astype(dt)
f = jax.jit(lambda k, x: jaxnorm.sample(k, x, **kw))
for i in range(3):
    print(f"trace run {which} B={b} V={v} {dt} #{i}", flush=True)
    jax.block_until_ready(f(jax.random.key(i), x))
PY
}
tr top_k 1 128256 float32; tr top_k_top_p 1 128256 float32; tr top_k 1 32000 float32; tr top_k 8 128256 float32
grep -c "^trace row" $OUT/trace2.log; echo "trace2 total $SECONDS s"
