# Same-call A/B on the H200: main's ffi_src (base, .scratch/base) against main with
# ln-stage-x.patch (as fixed here) and the hist-push patch (landed as e473b36) applied (new; the two
# touch different kernels: LayerNorm's backward tiles and the general sampler's gather). Two builds,
# then base1 new1 base2 new2, each timing the norms' forward+backward (bf16 65536-262144, fp16
# 262144) and the sampler at batch 1 and 8 (128256, float32 and bfloat16, top-k and top-k with
# top-p; every drawn token checked against the reference's kept set). Then, in the time left, the
# sampling and norm tests on the new tree.
#   COMMIT=<hash> bash benchmarks/results/h200-stage-x-hist-push/call1.sh      (carry .scratch)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a $OUT/log.txt) 2>&1
echo "commit $COMMIT"; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
LIMIT=430 BASE=.scratch/base bash benchmarks/ab_base.sh \
  'python3 benchmarks/ab_rows.py $LABEL 65536,131072,262144 bfloat16 layer_norm+bwd,rms_norm+bwd;
   python3 benchmarks/ab_rows.py $LABEL 262144 float16 layer_norm+bwd;
   python3 benchmarks/ab_sampling.py $LABEL 1,8 float32,bfloat16 "top_k=50;top_k=50,top_p=0.9" 128256'
python3 benchmarks/ab_rows.py --compare $OUT/ab.log base new | tee $OUT/ab-rows.txt
python3 benchmarks/ab_sampling.py --compare /tmp/ab base new | tee $OUT/ab-sampling.txt
echo "checks failed: $(grep -c 'CHECK FAILED' $OUT/ab.log)"; cp /tmp/ab/*.json $OUT/
left=$((585 - SECONDS))
if [ $left -gt 60 ]; then
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false timeout $left \
    python3 -m pytest -q -n 16 -p no:benchmark -p no:cacheprovider tests/test_sampling.py tests/test_norm.py > $OUT/pytest.log 2>&1
  echo "pytest rc=$? ($left s allowed): $(tail -n 1 $OUT/pytest.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -10
fi
echo "total $SECONDS s"
