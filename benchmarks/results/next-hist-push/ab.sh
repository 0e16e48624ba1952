# Prepared, not run: the general sampler's gather histogram exchanged by st.async (hist-push.patch)
# against main, in one call on the H200. From the repository root of a scratch branch with the
# patch applied and committed, after `mkdir -p .scratch/base && git archive main ffi_src | tar -x -C .scratch/base`:
#   COMMIT=<hash> bash benchmarks/results/next-hist-push/ab.sh        (carry .scratch)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a $OUT/log.txt) 2>&1
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
timeout 130 python3 -m pytest -q -n 16 -p no:benchmark tests/test_sampling.py > $OUT/pytest.log 2>&1
tail -n 1 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -10
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.5
LIMIT=500 BASE=.scratch/base bash benchmarks/ab_base.sh \
  'python3 benchmarks/ab_sampling.py $LABEL 1,8 float32,bfloat16 "top_k=50;top_k=50,top_p=0.9;top_p=0.9" 32000,128256'
python3 benchmarks/ab_sampling.py --compare /tmp/ab base new | tee $OUT/ab-sampling.txt
grep -c "CHECK FAILED" $OUT/ab.log
echo "total $SECONDS s"
