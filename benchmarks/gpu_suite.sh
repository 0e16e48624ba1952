#!/usr/bin/env bash
# One GPU call for a commit to be taken: this tree built into /tmp/m1 (gpu_setup.sh's BUILD_INTO:
# its .so copied into the tree), the whole suite with -v (so a run cut off by the call's limit
# names its failures; the log gzipped into $OUT), then, if time is left, one round of
# ab_norm_bwd.py's SET on this build.
#   COMMIT=<hash> SET=addnorm bash benchmarks/gpu_suite.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
BUILD_INTO=/tmp/m1 source "$(dirname "$0")/gpu_setup.sh"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
t1=$SECONDS; timeout $((585 - SECONDS)) python3 -m pytest -v -n 16 -p no:cacheprovider -p no:benchmark tests > $OUT/pytest.log 2>&1
echo "pytest rc=$?: $(tail -n 1 $OUT/pytest.log)"
echo "passed $(grep -c ' PASSED ' $OUT/pytest.log), skipped $(grep -c ' SKIPPED ' $OUT/pytest.log)"
grep -E " (FAILED|ERROR) |^(FAILED|ERROR)" $OUT/pytest.log | head -20; echo "suite $((SECONDS - t1)) s"
gzip $OUT/pytest.log
if [ -n "${SET:-}" ] && [ $SECONDS -lt 540 ]; then
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 timeout $((595 - SECONDS)) python3 benchmarks/ab_norm_bwd.py taken1 /tmp/ab "$SET" 2>&1 \
    | grep -v Warn | tee $OUT/ab.log
fi
echo "total $SECONDS s"
