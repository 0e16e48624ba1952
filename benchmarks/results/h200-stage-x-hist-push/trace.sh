# Ran in call2.sh (2026-11-29, on the hist-push tree with trace-on-hist-push.patch): the general sampler's batch-1 chain, step by step (trace-points.patch applied
# on a scratch branch and committed; never merge it). Thread 0's clock64 at the row's steps,
# printed by CTAs 0 and 1 of each row's cluster for launches of at most 8 rows; calls 2-3 of each
# setting are the warm ones. From the repository root: COMMIT=<hash> bash .../trace.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a $OUT/log.txt) 2>&1
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv,noheader
tr() { timeout 40 python3 - "$@" <<'PY' 2>&1 | grep -E "^trace|Error|error" | tee -a $OUT/trace.log
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
tr top_k 1 128256 float32; tr top_k_top_p 1 128256 float32; tr top_k 1 128256 bfloat16; tr top_k 1 32000 float32
tr top_k 8 128256 float32
echo "total $SECONDS s"
