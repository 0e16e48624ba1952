# One build with a TEMP switch JAXNORM_TEMP_NARROW for the 16-bit norm backward's CTA-wide tiles
# (1024-8192 columns): 0 main's tiles, 1 the scale held in shared memory for all the worker's rows,
# 2 held and the rows staged two spans ahead (call 1's new side). Two rounds a side, every case's
# output checked against the reference and for the same bits on a second run; then the norm
# tests under modes 1 and 2.
# Run from the repository root: bash benchmarks/results/h200-narrow-bwd/call2.sh
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
run() { local lab=$1; shift; [ $SECONDS -gt 430 ] && { echo "skip $lab"; return; }
  env "$@" timeout 90 python3 benchmarks/ab_norm_bwd.py $lab /tmp/ab narrow 2>&1 | grep -v Warn >> $OUT/ab.log; }
for i in 1 2; do run m0r$i JAXNORM_TEMP_NARROW=0; run m1r$i JAXNORM_TEMP_NARROW=1; run m2r$i JAXNORM_TEMP_NARROW=2; done
grep -c "NOT REPRODUCIBLE" $OUT/ab.log; grep "NOT REPRODUCIBLE" $OUT/ab.log
python3 benchmarks/ab_norm_bwd.py --compare /tmp/ab m0 m1 | tee $OUT/ab-summary-1.txt
python3 benchmarks/ab_norm_bwd.py --compare /tmp/ab m0 m2 | tee $OUT/ab-summary-2.txt
cp /tmp/ab/*.json $OUT/ 2>/dev/null
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
for m in 1 2; do
  JAXNORM_TEMP_NARROW=$m timeout $(( (590 - SECONDS) / (3 - m) )) python3 -m pytest -q -n 14 -p no:benchmark \
    tests/test_norm.py tests/test_add_norm.py > $OUT/pytest-norm-$m.log 2>&1
  echo "mode $m pytest rc=$?: $(tail -n 1 $OUT/pytest-norm-$m.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-norm-$m.log | head
done
echo "total $SECONDS s"
