# Call 3 of h200-half-wide: the taken commit (B9 bounded, the residual-add forward at eight CTAs,
# no switches) built into /tmp/m1 (its .so copied into the tree); the whole suite, -v so a cut-off
# run names its failures; then one round of the residual-add A/B set on this build.
#   COMMIT=<hash> bash benchmarks/results/h200-half-wide/call3.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
BUILD_INTO=/tmp/m1 source "$(dirname "$0")/../../gpu_setup.sh"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
t1=$SECONDS; timeout $((585 - SECONDS)) python3 -m pytest -v -n 16 -p no:cacheprovider -p no:benchmark tests > $OUT/pytest.log 2>&1
echo "pytest rc=$?: $(tail -n 1 $OUT/pytest.log)"
echo "passed $(grep -c ' PASSED ' $OUT/pytest.log), skipped $(grep -c ' SKIPPED ' $OUT/pytest.log)"
grep -E " (FAILED|ERROR) |^(FAILED|ERROR)" $OUT/pytest.log | head -20; echo "suite $((SECONDS - t1)) s"
gzip $OUT/pytest.log
if [ $SECONDS -lt 540 ]; then
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 timeout $((595 - SECONDS)) python3 benchmarks/ab_norm_bwd.py taken1 /tmp/ab addnorm 2>&1 \
    | grep -v Warn | tee $OUT/ab.log
fi
echo "total $SECONDS s"
