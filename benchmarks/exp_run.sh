#!/usr/bin/env bash
# Experiment call: A = this tree; B, C, D = the same built with $B_FLAGS, $C_FLAGS, $D_FLAGS as
# CMAKE_CUDA_FLAGS; a bf16 bench of each in one run, the tests ($PYTEST_ARGS) on the last build,
# or on A with TEST_AFTER=a.
set -u -o pipefail
OUT=${OUT:-/tmp/o}; T0=$(date +%s)
left() { echo $(( ${LIMIT:-580} - ($(date +%s) - T0) )); }
W=${WIDTHS:-128,1024,4096,8192,16384,32768,65536,262144}
bench() {  # name
  timeout $(( $(left) - 5 )) python3 benchmarks/bench.py --out $OUT/$1 --dtypes bfloat16 --widths $W --small none \
    --no-tokamax --budget ${BUDGET:-100} ${BENCH_EXTRA:-} > $OUT/bench_$1.log 2>&1; echo "bench $1 rc=$?"
  grep -A14 "^## Summary" $OUT/$1/bench.md
}
tests() {
  timeout $(( $(left) - 10 )) python3 -m pytest -q -x -p no:cacheprovider ${PYTEST_ARGS:-tests/test_ops.py} > $OUT/pytest.log 2>&1
  echo "pytest ($1) rc=$? $(tail -1 $OUT/pytest.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head
}
COMMIT=$COMMIT STAGES="build" bash benchmarks/gpu_run.sh
bench a
[ "${TEST_AFTER:-}" = a ] && tests a
for v in b c d; do
  flags_var=${v^^}_FLAGS; flags=${!flags_var:-}
  [ -z "$flags" ] && continue
  [ $(left) -gt 120 ] || { echo "no time left for $v"; break; }
  CMAKE_ARGS="-DCMAKE_CUDA_FLAGS=$flags" JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -e . \
    > $OUT/build_$v.log 2>&1; echo "build $v ($flags) rc=$?"
  bench $v
done
[ "${TEST_AFTER:-}" != a ] && [ $(left) -gt 30 ] && tests "last build"
echo "total $(( $(date +%s) - T0 ))s"
rm -f $OUT/*/bench.png $OUT/*/bench.json $OUT/build*.log
