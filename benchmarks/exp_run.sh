#!/usr/bin/env bash
# Experiment call: A = this tree; B = the same built with $B_FLAGS; bf16 bench of both in one run.
set -u -o pipefail
OUT=${OUT:-/tmp/o}; T0=$(date +%s)
left() { echo $(( ${LIMIT:-580} - ($(date +%s) - T0) )); }
W=${WIDTHS:-128,1024,4096,8192,16384,32768,65536,262144}
COMMIT=$COMMIT STAGES="build" bash benchmarks/gpu_run.sh
timeout ${TEST_T:-100} python3 -m pytest -q -x -p no:cacheprovider ${PYTEST_ARGS:-tests/test_ops.py} > $OUT/pytest.log 2>&1; echo "pytest rc=$? $(tail -1 $OUT/pytest.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head
timeout ${A_TIMEOUT:-200} python3 benchmarks/bench.py --out $OUT/a --dtypes bfloat16 --widths $W --small none --no-tokamax --budget 150 ${A_ARGS:-} > $OUT/bench_a.log 2>&1; echo "bench A rc=$?"
grep -A14 "^## Summary" $OUT/a/bench.md
if [ $(left) -gt 150 ]; then
  CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=$B_FLAGS" JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/build_b.log 2>&1; echo "build B rc=$?"
  timeout $(( $(left) - 5 )) python3 benchmarks/bench.py --out $OUT/b --dtypes bfloat16 --widths $W --small none --no-tokamax --budget 100 ${B_ARGS:-} > $OUT/bench_b.log 2>&1; echo "bench B rc=$?"
  grep -A14 "^## Summary" $OUT/b/bench.md
fi
echo "total $(( $(date +%s) - T0 ))s"
rm -f $OUT/*/bench.png $OUT/*/bench.json $OUT/build*.log
