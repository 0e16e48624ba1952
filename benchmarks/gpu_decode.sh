#!/usr/bin/env bash
# GPU calls for the decoding-step family (decode_attention, embed_with_position). STAGE=1: build,
# the family's tests, compute-sanitizer's memcheck over benchmarks/memcheck_decode.py (splits,
# appends, invalid lengths, every head_dim, both kernels), and the decode benchmark (device time). STAGE=2: the embedding benchmark, the decoding example
# and the tests named by PYTEST_ARGS (default: the family's) and the main job.
#   COMMIT=<hash> names the commit measured (the device tree's .git may be stale).
source "$(dirname "$0")/gpu_setup.sh"
FAMILY="tests/test_decode_attention.py tests/test_embedding.py"
if [ "${STAGE:-1}" = 1 ]; then
  if [ "${TESTS:-1}" = 1 ]; then
    timeout 200 python3 -m pytest -q $FAMILY 2>&1 | tee "$OUT/pytest-decode.log" | tail -4
  fi
  # Memcheck: no pre-allocation (the sanitizer tracks real allocations) and no command buffers.
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS="--xla_gpu_enable_command_buffer= --xla_gpu_autotune_level=0" \
    timeout ${MEMCHECK_TIMEOUT:-150} compute-sanitizer --tool memcheck --print-limit 20 \
    python3 benchmarks/memcheck_decode.py 2>&1 | tee "$OUT/memcheck-decode.log" | tail -8
  timeout ${BENCH_TIMEOUT:-240} python3 benchmarks/bench_decode.py --out "$OUT" ${BENCH_ARGS:-} 2>&1 |
    tee "$OUT/bench-decode.log" | tail -80
else
  timeout 150 python3 benchmarks/bench_embedding.py --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench-embedding.log" | tail -30
  [ -f examples/gpt_decoder.py ] && timeout 200 python3 examples/gpt_decoder.py ${EXAMPLE_ARGS:-} 2>&1 | tee "$OUT/example.log" | tail -20
  timeout 200 python3 -m pytest -q ${PYTEST_ARGS:-$FAMILY} 2>&1 | tee "$OUT/pytest.log" | tail -4
  timeout 100 python3 -m jaxnorm 2>&1 | tee "$OUT/main-job.log" | tail -5
fi
