# One build with a TEMP switch: the 16-bit norm backward's CTA-wide tiles staged two row spans
# ahead (new, the default) against main's unstaged tiles (old: JAXNORM_TEMP_NARROW_OFF=1), two
# rounds a side, every case's output checked against the reference; then the norm tests, staged.
# Run from the repository root: bash benchmarks/results/h200-narrow-bwd/call1.sh
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
run() { local lab=$1; shift; [ $SECONDS -gt 400 ] && { echo "skip $lab"; return; }
  env "$@" timeout 90 python3 benchmarks/ab_norm_bwd.py $lab /tmp/ab narrow 2>&1 | grep -v Warn >> $OUT/ab.log; }
for i in 1 2; do run new$i X=1; run old$i JAXNORM_TEMP_NARROW_OFF=1; done
cat $OUT/ab.log | grep -v "^$" | tail -50
python3 benchmarks/ab_norm_bwd.py --compare /tmp/ab old new | tee $OUT/ab-summary.txt
cp /tmp/ab/*.json $OUT/ 2>/dev/null
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout $((580 - SECONDS)) python3 -m pytest -q -n 14 -p no:benchmark tests/test_norm.py tests/test_add_norm.py \
  > $OUT/pytest-norm.log 2>&1
echo "pytest rc=$?: $(tail -n 1 $OUT/pytest-norm.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-norm.log | head -20
echo "total $SECONDS s"
