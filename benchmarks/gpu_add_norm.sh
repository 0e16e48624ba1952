#!/usr/bin/env bash
# One GPU call for the fused residual-add + norm: build, the norm family's tests (the add-norm
# tests, the plain norms', which share the row kernels, and the export contract; PYTEST_ARGS
# overrides), then bench_add_norm.py (device time; bf16 8192x4096, 16384x8192, 4096x16384, fused
# against the unfused `x + r` -> norm pair and the jnp form). Everything is written to $OUT; the
# benchmark gets what is left of 230 s from the build's start (BENCH_TIMEOUT overrides) and writes
# its files after every shape.
#   COMMIT=<hash> names the commit measured (the device tree's .git may be stale).
#   BENCH_ARGS: e.g. --norms rms_norm --dtype float16; TESTS=0 skips the tests.
source "$(dirname "$0")/gpu_setup.sh"
if [ "${TESTS:-1}" = 1 ]; then
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 timeout ${TEST_TIMEOUT:-100} python3 -m pytest -q -n 8 -p no:benchmark \
    ${PYTEST_ARGS:-tests/test_add_norm.py tests/test_norm.py tests/test_ffi_targets.py tests/test_export.py} 2>&1 |
    tee "$OUT/pytest-add-norm.log" | tail -4
fi
XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.8} \
  timeout ${BENCH_TIMEOUT:-$(( 230 - $(date +%s) + t0 ))} python3 benchmarks/bench_add_norm.py --out "$OUT" ${BENCH_ARGS:-} 2>&1 |
  tee "$OUT/bench-add-norm.log" | tail -30
