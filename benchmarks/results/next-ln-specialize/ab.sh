# Prepared, not run (branch next/ln-specialize): LayerNorm's forward stores take op.specialize as
# RMSNorm's do since v23 (scale and bias present, split packs as constants). SASS of the bf16
# 256x8 cluster-16 tile: ~81 -> ~46 instructions a pack on the common path after the reduction
# (the gaps between stores, nvdisasm), 2064 -> 2440 instructions in all (both paths); registers
# 64 (four CTAs a SM, no spill), 76 -> 79 for the clusters of 2 (three a SM), 58 -> 64 for the
# 512x4 CTA-wide tile (16384 columns, two a SM). Prediction: LayerNorm forward +1-4% from 16384
# (RMSNorm's 67 -> 37 gave +1-4% in v23), nothing else moves.
# Prepare, carry .scratch:   mkdir -p .scratch/base && git archive main ffi_src | tar -x -C .scratch/base
# Run:                       COMMIT=<hash> bash benchmarks/results/next-ln-specialize/ab.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 100 python3 -m pytest -q -n 16 -p no:benchmark tests/test_norm.py tests/test_add_norm.py > $OUT/pytest.log 2>&1
tail -n 1 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -10
BASE=.scratch/base LIMIT=420 bash benchmarks/ab_base.sh 'XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 python3 benchmarks/ab_rows.py \
  $LABEL 4096,16384,32768,65536,131072,262144,16x32768,64x65536 bfloat16,float16 layer_norm,rms_norm'
python3 benchmarks/ab_rows.py --compare $OUT/ab.log base new | tee $OUT/ab-rows.txt
