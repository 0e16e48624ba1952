#!/usr/bin/env bash
# Experiment call: build, correctness subset, bf16 bench with prefetch; then (time permitting)
# the same bench built with JAXNORM_PREFETCH=0 for an A/B in one run.
set -u -o pipefail
OUT=${OUT:-/tmp/o}; T0=$(date +%s)
left() { echo $(( ${LIMIT:-580} - ($(date +%s) - T0) )); }
W=${WIDTHS:-128,1024,4096,8192,16384,32768,65536,262144}
COMMIT=$COMMIT STAGES="build" bash benchmarks/gpu_run.sh
timeout 170 python3 -m pytest -q -x -p no:cacheprovider ${PYTEST_ARGS:-tests/test_ops.py tests/test_softmax.py tests/test_norm.py} > $OUT/pytest.log 2>&1; echo "pytest rc=$? $(tail -1 $OUT/pytest.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head
timeout $(( $(left) - 10 )) python3 benchmarks/bench.py --out $OUT/on --dtypes bfloat16 --widths $W --small none --no-tokamax --budget 150 > $OUT/bench_on.log 2>&1; echo "bench on rc=$?"
grep -A14 "^## Summary" $OUT/on/bench.md
if [ $(left) -gt 200 ]; then
  CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=-DJAXNORM_PREFETCH=0" JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/build_off.log 2>&1; echo "build off rc=$?"
  timeout $(( $(left) - 5 )) python3 benchmarks/bench.py --out $OUT/off --dtypes bfloat16 --widths $W --small none --no-tokamax --budget 120 > $OUT/bench_off.log 2>&1; echo "bench off rc=$?"
  grep -A14 "^## Summary" $OUT/off/bench.md
fi
echo "total $(( $(date +%s) - T0 ))s"
rm -f $OUT/*/bench.png $OUT/*/bench.json $OUT/build*.log
