# Ran 2026-11-29 (README.md): params-loads.patch and rank-sort.patch (README.md) together against main, in
# one call on the H200. From the repository root, on a scratch branch with both patches applied and
# committed, after
#   mkdir -p .scratch/base && git archive main ffi_src | tar -x -C .scratch/base
#   bash benchmarks/ptx_check.sh            (every CUDA unit through nvcc's front end, locally)
#   COMMIT=<hash> bash benchmarks/results/h200-batch1-chain/call1.sh   (carry .scratch; ran 2026-11-29, merged as 8a02fa1)
# ab_base.sh's two builds and alternating rounds (base1 new1 base2 new2): batch 1 and 8 in float32
# and bfloat16, 64 rows in float32 (the 256-thread instances, whose spills moved), 128256
# columns; every drawn token checked. Then the sampling tests on the patched tree in the time left
# (call1.sh of ../h200-stage-x-hist-push/ ran this shape in 550 s). Outputs tarred: a call
# returns only a few files.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a $OUT/log.txt) 2>&1
echo "commit $COMMIT"; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
LIMIT=420 BASE=.scratch/base bash benchmarks/ab_base.sh \
  'python3 benchmarks/ab_sampling.py $LABEL 1,8 float32,bfloat16 "top_k=50;top_p=0.9;top_k=50,top_p=0.9" 128256;
   python3 benchmarks/ab_sampling.py ${LABEL}b 64 float32 "top_k=50;top_p=0.9;top_k=50,top_p=0.9;min_p=0.1" 128256'
python3 benchmarks/ab_sampling.py --compare /tmp/ab base new | tee $OUT/ab-sampling.txt
echo "checks failed: $(grep -c 'CHECK FAILED' $OUT/ab.log)"
left=$((585 - SECONDS))
if [ $left -gt 60 ]; then
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false timeout $left \
    python3 -m pytest -q -n 16 -p no:benchmark -p no:cacheprovider tests/test_sampling.py > /tmp/ab/pytest.log 2>&1
  echo "pytest rc=$? ($left s allowed): $(tail -n 1 /tmp/ab/pytest.log)"; grep -E "^(FAILED|ERROR)" /tmp/ab/pytest.log | head -10
fi
tar czf $OUT/ab.tgz -C /tmp/ab . ; echo "total $SECONDS s"
