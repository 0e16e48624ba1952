#!/usr/bin/env bash
# One GPU call for the sampling family: build, its tests, its benchmark (device time), and the
# FlashInfer anchor (benchmarks/anchors/flashinfer_sampling.cu) built against its headers in .fi/include
# (carried; see benchmarks/README.md).
#   MODE=quick|full  FULL_SUITE=1 also runs the whole test suite. PYTEST_ARGS: more pytest
#   arguments (-n 14 with pytest-xdist).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ -d .fi/include ]; then
  nvcc -O3 -std=c++17 -arch=sm_90a -I.fi/include benchmarks/anchors/flashinfer_sampling.cu -o .fi/fis -lcurand \
    > .fi/fis_build.log 2>&1 &
fi
source "$(dirname "$0")/gpu_setup.sh"
# No preallocation: test_export runs its artifact in a second process on the same GPU.
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 420 python3 -m pytest -q -x ${PYTEST_ARGS:-} tests/test_sampling.py tests/test_ffi_targets.py tests/test_export.py \
  tests/test_decode_example.py 2>&1 | tee "$OUT/pytest-sampling.log" | tail -6
if [ "${FULL_SUITE:-0}" = 1 ]; then
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 420 python3 -m pytest -q 2>&1 | tee "$OUT/pytest-all.log" | tail -4
fi
timeout ${BENCH_TIMEOUT:-360} python3 benchmarks/bench_sampling.py --out "$OUT" $([ "${MODE:-quick}" = quick ] && echo --quick) 2>&1 | tee "$OUT/bench-sampling.log" | tail -70
wait
if [ -x .fi/fis ]; then
  .fi/fis 2>&1 | tee "$OUT/flashinfer-events.log"
  FIS_REPS=2 ncu --csv --metrics gpu__time_duration.sum --cache-control all --clock-control none \
      --log-file "$OUT/flashinfer-ncu.csv" .fi/fis > "$OUT/flashinfer-ncu.out" 2> "$OUT/flashinfer-ncu.err"
  tail -2 "$OUT/flashinfer-ncu.err"
  python3 benchmarks/flashinfer_ncu.py "$OUT/flashinfer-ncu.out" "$OUT/flashinfer-ncu.csv" | tee "$OUT/flashinfer-ncu.md"
else
  tail -5 .fi/fis_build.log 2>/dev/null
fi
