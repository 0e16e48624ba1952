#!/usr/bin/env bash
# GPU call for causal linear attention: build, the family's tests (PYTEST_ARGS overrides),
# flash-linear-attention from the wheels in .whl/ (git-ignored; see README), and
# bench_linear_attention.py --fla (device time), everything written to $OUT. The benchmark gets
# what is left of 570 s from the build's start (BENCH_TIMEOUT overrides), so the call fits in 10 min;
# it writes its files after every shape, so a cut run keeps what it measured.
#   COMMIT=<hash> names the commit measured (the device tree's .git may be stale).
#   BENCH_ARGS: e.g. --quick, --reps 3, --fla-timer events (if torch.profiler misbehaves beside
#   JAX's profiler); TESTS=0 skips the tests.
source "$(dirname "$0")/gpu_setup.sh"
if [ "${TESTS:-1}" = 1 ]; then
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 timeout ${TEST_TIMEOUT:-150} python3 -m pytest -q -n 12 -p no:benchmark \
    ${PYTEST_ARGS:-tests/test_linear_attention.py tests/test_ffi_targets.py tests/test_export.py} 2>&1 |
    tee "$OUT/pytest-linear-attention.log" | tail -4
fi
FLA=""
if ls .whl/*.whl >/dev/null 2>&1; then
  # Pure-Python wheels, no dependencies fetched (the machine has torch, triton, einops, transformers).
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  if ! python3 -c "import fla.ops.linear_attn" 2>"$OUT/fla-import.log"; then
    # fla's models need a newer transformers than the machine may have; the ops are all in fla-core.
    tail -2 "$OUT/fla-import.log"; echo "fla: retrying with fla-core alone"
    rm -rf /tmp/site && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-*.whl
  fi
  python3 -c "import fla, torch, triton; print('fla', fla.__version__, 'torch', torch.__version__, 'triton', triton.__version__)" && FLA=--fla
else
  echo "fla: no wheels in .whl/ (carry .whl); benchmark without it"
fi
XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.5} \
  timeout ${BENCH_TIMEOUT:-$(( 570 - $(date +%s) + t0 ))} python3 benchmarks/bench_linear_attention.py --out "$OUT" $FLA ${BENCH_ARGS:-} 2>&1 |
  tee "$OUT/bench-linear-attention.log" | tail -60
