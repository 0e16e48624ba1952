# Same-call A/B of the merge (430265d: 16-bit RMSNorm's clusters of 8 staged at two CTAs an SM,
# from 8 rows a worker) against its base 0ca769e, two builds, two rounds a side, on another
# machine than call 1's. Carry .scratch/base (git archive 0ca769e ffi_src).
# Run from the repository root: bash benchmarks/results/h200-staged-2cta/call5.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LIMIT=330 BASE=.scratch/base bash benchmarks/ab_base.sh \
  'python3 benchmarks/ab_rows.py $LABEL 65536,131072,262144,64x131072,256x131072 bfloat16 rms_norm'
XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 python3 benchmarks/ab_rows.py --compare $OUT/ab.log base new | tee $OUT/ab-rows.txt
