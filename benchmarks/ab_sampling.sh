#!/usr/bin/env bash
# One GPU call: build, the sampling family's tests, then a same-call A/B of the sampling kernels by
# an environment switch that a commit's CUDA handler reads (a TEMP knob), then the quick benchmark
# while the call has time:
#
#   OLD="JAXNORM_TEMP_X=1" GRID='1,8,64,256 float32,bfloat16 "top_p=0.9;top_p=0.5" 128256' \
#     COMMIT=<hash> bash benchmarks/ab_sampling.sh
#
# GRID: ab_sampling.py's BATCHES DTYPES METHODS [VOCABS]; runs new1 (no switch), old1 (OLD set),
# new2, old2, then `ab_sampling.py --compare` ($OUT/ab-summary.txt). RUN_TIMEOUT: seconds a run.
source "$(dirname "$0")/gpu_setup.sh"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 150 python3 -m pytest -q -n 14 -p no:benchmark tests/test_sampling.py tests/test_ffi_targets.py \
  tests/test_export.py tests/test_decode_example.py > $OUT/pytest-sampling.log 2>&1
tail -n 1 $OUT/pytest-sampling.log; grep -E "^(FAILED|ERROR)" $OUT/pytest-sampling.log | head -20
mkdir -p /tmp/ab
run() { local lab=$1; shift; [ $SECONDS -gt 470 ] && { echo "skip $lab"; return; }
  env "$@" OUT=/tmp/ab timeout ${RUN_TIMEOUT:-110} bash -c "python3 benchmarks/ab_sampling.py $lab ${GRID:?GRID}" 2>&1 |
    grep -v Warn >> $OUT/ab.log; }
for i in 1 2; do run new$i X=1; run old$i ${OLD:?OLD}; done
grep -c "CHECK FAILED" $OUT/ab.log
python3 benchmarks/ab_sampling.py --compare /tmp/ab old new | tee $OUT/ab-summary.txt
[ $SECONDS -lt 480 ] && timeout $(( 585 - SECONDS )) python3 benchmarks/bench_sampling.py --out "$OUT" --quick \
  > "$OUT/bench-sampling.log" 2>&1
grep -E 'ceiling|checks|top_k=50 |top_p=0.9 |top_k=50,top_p|top_k op|min_p|no filter' "$OUT/bench-sampling.log" | head -50
echo "total $SECONDS s"
