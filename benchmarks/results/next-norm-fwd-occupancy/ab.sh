# Prepared, not run (branch next/norm-fwd-occupancy): one GPU call, two changes to the norm forwards'
# 256-thread 8-pack tiles against main's, which measure apart (different widths and dtypes):
#  - 16-bit RMSNorm at 262144 columns takes the one-shot clusters of 16 at four CTAs an SM
#    (64 registers), as LayerNorm's do since v24, instead of persistent 512-thread CTAs;
#  - float32 norm tiles (clusters of 2-16 at 16384-131072 columns) at four CTAs an SM, as the
#    16-bit ones (RMSNorm spills 8 bytes there; LayerNorm's clusters of 2 keep three).
# Prediction: RMSNorm bf16 262144 2.63 -> 2.70-2.75 TB/s (LayerNorm's one-shot 16 at four CTAs
# gained 6%); float32 norms +2-8% at 32768-131072, RMSNorm less (its spill).
# Prepare, carry .scratch:   mkdir -p .scratch/base && git archive main ffi_src | tar -x -C .scratch/base
# Run:                       COMMIT=<hash> bash benchmarks/results/next-norm-fwd-occupancy/ab.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 100 python3 -m pytest -q -n 14 -p no:benchmark tests/test_norm.py tests/test_ops.py > $OUT/pytest-norm.log 2>&1
tail -n 1 $OUT/pytest-norm.log; grep -E "^(FAILED|ERROR)" $OUT/pytest-norm.log | head -10
BASE=.scratch/base LIMIT=420 bash benchmarks/ab_base.sh 'python3 benchmarks/bench.py --timer device --impls jaxnorm --no-tokamax \
  --ops rms_norm,layer_norm --dtypes bfloat16,float16,float32 --directions fwd --widths 16384,32768,65536,131072,262144 \
  --small none --out /tmp/ab/$LABEL > /tmp/ab/$LABEL.log 2>&1'
for i in 1 2; do for d in bfloat16 float16 float32; do
  [ -f /tmp/ab/new$i/bench.json ] && python3 benchmarks/compare.py /tmp/ab/base$i/bench.json /tmp/ab/new$i/bench.json $d
done; done | tee $OUT/ab-compare.txt
