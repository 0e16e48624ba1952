# Prepared, not run (branch next/sampling-insn, from a SASS audit of the float32 samplers): one GPU
# call, the sampling kernels with fewer instructions a token against main's. Prepare, carry
# .scratch:   mkdir -p .scratch/base && git archive main ffi_src | tar -x -C .scratch/base
# Run:        COMMIT=<hash> bash benchmarks/results/next-sampling-insn/ab.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 150 python3 -m pytest -q -n 14 -p no:benchmark tests/test_sampling.py tests/test_decode_example.py \
  > $OUT/pytest-sampling.log 2>&1
tail -n 1 $OUT/pytest-sampling.log; grep -E "^(FAILED|ERROR)" $OUT/pytest-sampling.log | head -10
BASE=.scratch/base LIMIT=470 bash benchmarks/ab_base.sh 'python3 benchmarks/ab_sampling.py $LABEL 1,64,256 float32,bfloat16 "top_p=0.9;top_k=50;top_k=50,top_p=0.9;min_p=0.1;top_k op k=1024" 128256'
grep -c "CHECK FAILED" $OUT/ab.log
python3 benchmarks/ab_sampling.py --compare /tmp/ab base new | tee $OUT/ab-summary.txt
