# Prepared, not run: params-loads.patch (row_params loads every operand entry before it uses any)
# against main, in one call on the H200. From the repository root, on a scratch branch with the
# patch applied and committed, after
#   mkdir -p .scratch/base && git archive main ffi_src | tar -x -C .scratch/base
#   bash benchmarks/ptx_check.sh            (every CUDA unit through nvcc's front end, locally)
#   COMMIT=<hash> bash benchmarks/results/next-params-loads/ab.sh        (carry .scratch)
# The sampling tests on the patched tree first, then ab_base.sh's alternating builds: batch 1, 8
# and 64 (the 256-thread instances, whose spills moved), float32 and bfloat16, 128256 columns.
# Results are tarred into one file: a call returns only a few files.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a $OUT/log.txt) 2>&1
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -n 16 -p no:benchmark -p no:cacheprovider tests/test_sampling.py > $OUT/pytest.log 2>&1
tail -n 1 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -10
LIMIT=520 BASE=.scratch/base bash benchmarks/ab_base.sh \
  'python3 benchmarks/ab_sampling.py $LABEL 1,8,64 float32,bfloat16 "top_k=50;top_p=0.9;top_k=50,top_p=0.9;min_p=0.1" 128256'
python3 benchmarks/ab_sampling.py --compare /tmp/ab base new | tee $OUT/ab-sampling.txt
echo "checks failed: $(grep -c 'CHECK FAILED' $OUT/ab.log)"
tar czf $OUT/ab.tgz -C /tmp/ab . ; echo "total $SECONDS s"
