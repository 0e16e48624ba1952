# One build with a TEMP switch JAXNORM_TEMP_NARROW for the 16-bit norm backward at 1024-4096 columns:
# 0 main's tiles (2 packs a thread, 512 threads an SM), 1 the scale held in shared memory for
# all the worker's rows (call 2 had a bug there: illegal address), 3 one pack a thread at 1024
# threads an SM (64 registers). Two rounds a side, outputs checked against the reference and for
# the same bits on a second run; then the norm tests under modes 1 and 3.
# Run from the repository root: bash benchmarks/results/h200-narrow-bwd/call3.sh
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
run() { local lab=$1; shift; [ $SECONDS -gt 430 ] && { echo "skip $lab"; return; }
  env "$@" timeout 90 python3 benchmarks/ab_norm_bwd.py $lab /tmp/ab narrow 2>&1 | grep -v Warn | tail -n 15 >> $OUT/ab.log; }
for i in 1 2; do run m0r$i JAXNORM_TEMP_NARROW=0; run m1r$i JAXNORM_TEMP_NARROW=1; run m3r$i JAXNORM_TEMP_NARROW=3; done
grep -c "NOT REPRODUCIBLE" $OUT/ab.log; grep "NOT REPRODUCIBLE" $OUT/ab.log
python3 benchmarks/ab_norm_bwd.py --compare /tmp/ab m0 m1 | tee $OUT/ab-summary-1.txt
python3 benchmarks/ab_norm_bwd.py --compare /tmp/ab m0 m3 | tee $OUT/ab-summary-3.txt
cp /tmp/ab/*.json $OUT/ 2>/dev/null
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
for m in 1 3; do
  JAXNORM_TEMP_NARROW=$m timeout $(( (590 - SECONDS) / (m == 1 ? 2 : 1) )) python3 -m pytest -q -n 14 -p no:benchmark \
    tests/test_norm.py tests/test_add_norm.py > $OUT/pytest-norm-$m.log 2>&1
  echo "mode $m pytest rc=$?: $(tail -n 1 $OUT/pytest-norm-$m.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-norm-$m.log | head
done
echo "total $SECONDS s"
