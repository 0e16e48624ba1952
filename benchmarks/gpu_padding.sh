#!/usr/bin/env bash
# GPU calls for the padding family. STAGE=1: build, the family's tests, compute-sanitizer's
# memcheck over the overflow and round-trip tests (no out-of-bounds access), the benchmark
# (device time) and the example. STAGE=2: the tests named by PYTEST_ARGS (default all: ~11 min on
# the H100, more than one call allows, so split them) and the main job.
#   COMMIT=<hash> names the commit measured (the device tree's .git may be stale).
source "$(dirname "$0")/gpu_setup.sh"
if [ "${STAGE:-1}" = 1 ]; then
  if [ "${TESTS:-1}" = 1 ]; then
    timeout 240 python3 -m pytest -q tests/test_padding.py tests/test_encoder_example.py 2>&1 |
      tee "$OUT/pytest-padding.log" | tail -4
  fi
  # Memcheck: XLA's allocator must not pre-allocate (the sanitizer tracks real allocations) and no
  # command buffers (graphs), so every kernel launch is checked.
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 200 \
    compute-sanitizer --tool memcheck --print-limit 20 python3 -m pytest -q -p no:cacheprovider \
    tests/test_padding.py -k "overflow or round_trip or offsets_many or past_tokens" 2>&1 |
    tee "$OUT/memcheck-padding.log" | tail -4
  timeout 300 python3 benchmarks/bench_padding.py --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench-padding.log" | tail -40
  timeout 60 python3 examples/packed_encoder.py 2>&1 | tee "$OUT/example.log" | tail -3
else
  timeout 420 python3 -m pytest -q ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest.log" | tail -4
  timeout 100 python3 -m jaxnorm 2>&1 | tee "$OUT/main-job.log" | tail -5
fi
