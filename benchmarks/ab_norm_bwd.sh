#!/usr/bin/env bash
# One GPU call: build, the row families' tests, then a same-call A/B of the norm backwards by an
# environment switch read by the CUDA handlers (a TEMP knob of the commit measured):
#
#   OLD="JAXNORM_TEMP_X=1" SET=partials COMMIT=<hash> bash benchmarks/ab_norm_bwd.sh
#
# runs benchmarks/ab_norm_bwd.py as new1 (no switch), old1 (OLD set), new2, old2, and prints the
# comparison ($OUT/ab-summary.txt). NEW: a switch for the new side instead (the old side unset).
# With ROWS="WIDTHS DTYPES OPS" (as ab_two_builds.sh's) it times benchmarks/ab_rows.py's shapes
# instead, and ROWS2, ROWS3 further sets in each run. TESTS: the test files (default the row
# families'), TEST_TIMEOUT (170 s; 0: none run), AB_UNTIL: the second past which no further run starts (500).
source "$(dirname "$0")/gpu_setup.sh"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
if [ "${TEST_TIMEOUT:-170}" != 0 ]; then
  timeout ${TEST_TIMEOUT:-170} python3 -m pytest -q -n 14 -p no:benchmark ${TESTS:-tests/test_add_norm.py tests/test_norm.py \
    tests/test_softmax.py tests/test_cross_entropy.py tests/test_ffi_targets.py tests/test_export.py} > $OUT/pytest-rows.log 2>&1
  tail -n 1 $OUT/pytest-rows.log; grep -E "^(FAILED|ERROR)" $OUT/pytest-rows.log | head -20
fi
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
run() { local lab=$1; shift; [ $SECONDS -gt ${AB_UNTIL:-500} ] && { echo "skip $lab"; return; }
  if [ -n "${ROWS:-}" ]; then
    for set in "$ROWS" ${ROWS2:+"$ROWS2"} ${ROWS3:+"$ROWS3"}; do
      env "$@" OUT=/tmp/ab timeout 100 python3 benchmarks/ab_rows.py $lab $set 2>&1 | grep -v Warn >> $OUT/ab.log
    done
  else
    env "$@" timeout 100 python3 benchmarks/ab_norm_bwd.py $lab /tmp/ab ${SET:-addnorm} 2>&1 | grep -v Warn >> $OUT/ab.log
  fi; }
mkdir -p /tmp/ab
for i in 1 2; do run new$i ${NEW:-X=1}; run old$i ${OLD:-X=1}; done
if [ -n "${ROWS:-}" ]; then python3 benchmarks/ab_rows.py --compare $OUT/ab.log old new | tee $OUT/ab-summary.txt
else python3 benchmarks/ab_norm_bwd.py --compare /tmp/ab old new | tee $OUT/ab-summary.txt; fi
cp /tmp/ab/*.json $OUT/ 2>/dev/null
echo "total $SECONDS s"
