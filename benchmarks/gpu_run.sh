#!/usr/bin/env bash
# One call on the GPU machine (see ../shared/gpu.md): build the CUDA handlers, run the test
# suite, the main job and the benchmark; logs and results land in $OUT.
#   STAGES="build test main bench"  which stages to run (default all)
#   COMMIT=<hash>                   the commit measured (the device copy has no .git)
#   BENCH_ARGS="..."                extra arguments for benchmarks/bench.py
#   PYTEST_ARGS="..."               extra arguments for pytest (default: the whole suite, 16 workers)
set -u -o pipefail
OUT=${OUT:-/tmp/jaxnorm-out}
mkdir -p "$OUT"
STAGES=${STAGES:-"build test main bench"}
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-16}
summary="$OUT/summary.txt"
echo "commit ${COMMIT:-unknown}  $(date -u +%FT%TZ)  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)" | tee "$summary"

stage() { [[ " $STAGES " == *" $1 "* ]]; }
elapsed() { echo "$(( $(date +%s) - t0 ))s"; }

if stage build; then
  t0=$(date +%s)
  JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -e . >"$OUT/build.log" 2>&1
  rc=$?
  echo "build rc=$rc $(elapsed)" | tee -a "$summary"
  bash benchmarks/build_profile.sh | tee -a "$summary"
  [[ $rc -eq 0 ]] || { tail -40 "$OUT/build.log"; exit 1; }
  python3 -c "import jaxnorm._ffi as f; print('cuda built:', f.cuda_built(), f.cuda_device_summary())" 2>&1 | tee -a "$summary"
fi
if stage test; then
  t0=$(date +%s)
  # 16 workers share the GPU: each takes 5% of its memory and allocates as it goes (without this
  # the workers' default preallocation ran out of memory at collection). The whole suite took
  # ~300 s on an H200 (results/h200-suite-146f26f), 360 s at f9ecee8, and at 8da2339 its 2630
  # tests did not finish in 420 s (results/h200-rows-8da2339).
  # -v names each test as it finishes, so a run cut off by the timeout still names its failures
  # (a -q run at 3db6fe2 showed one F and was killed before the summary that would have named it).
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false timeout ${TEST_TIMEOUT:-480} \
    python3 -m pytest -v -p no:cacheprovider -p no:benchmark -n ${PYTEST_WORKERS:-16} ${PYTEST_ARGS:-} >"$OUT/pytest.log" 2>&1
  echo "pytest rc=$? $(elapsed): $(tail -1 "$OUT/pytest.log")" | tee -a "$summary"
  echo "passed $(grep -c ' PASSED ' "$OUT/pytest.log"), skipped $(grep -c ' SKIPPED ' "$OUT/pytest.log")" | tee -a "$summary"
  grep -E " (FAILED|ERROR) |^(FAILED|ERROR)" "$OUT/pytest.log" | head -30 | tee -a "$summary"
fi
if stage main; then
  t0=$(date +%s)
  timeout 150 python3 -m jaxnorm >"$OUT/main.log" 2>&1
  echo "main rc=$? $(elapsed)" | tee -a "$summary"
  grep -E "FAIL|custom call|CUDA" "$OUT/main.log" | head -10 | tee -a "$summary"
fi
if stage bench; then
  t0=$(date +%s)
  timeout ${BENCH_TIMEOUT:-420} python3 benchmarks/bench.py --out "$OUT" ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
  echo "bench rc=$? $(elapsed)" | tee -a "$summary"
  tail -60 "$OUT/bench.log"
fi
cat "$summary"
