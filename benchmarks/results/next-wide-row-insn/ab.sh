# Prepared, not run (branch next/wide-row-insn, from a SASS audit of the wide-row bf16 forwards):
# one GPU call, the row forwards with 27-41% fewer instructions an element against main's.
# Prepare, carry .scratch:   mkdir -p .scratch/base && git archive main ffi_src | tar -x -C .scratch/base
# Run:                       COMMIT=<hash> bash benchmarks/results/next-wide-row-insn/ab.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 120 python3 -m pytest -q -n 14 -p no:benchmark tests/test_softmax.py tests/test_norm.py tests/test_add_norm.py \
  > $OUT/pytest-rows.log 2>&1
tail -n 1 $OUT/pytest-rows.log; grep -E "^(FAILED|ERROR)" $OUT/pytest-rows.log | head -10
BASE=.scratch/base LIMIT=500 bash benchmarks/ab_base.sh 'python3 benchmarks/bench.py --timer device --impls jaxnorm,xla \
  --ops softmax,log_softmax,rms_norm,layer_norm --dtypes bfloat16 --directions fwd --widths 16384,32768,131072,262144 \
  --small none --no-tokamax --out /tmp/ab/$LABEL > /tmp/ab/$LABEL.log 2>&1'
for i in 1 2; do python3 benchmarks/compare.py /tmp/ab/base$i/bench.json /tmp/ab/new$i/bench.json bfloat16; done | tee $OUT/ab-compare.txt
