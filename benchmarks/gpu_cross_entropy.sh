#!/usr/bin/env bash
# One GPU call for softmax cross-entropy: build, the family's tests (with the export contract and
# softmax's, which share the row kernels; PYTEST_ARGS overrides), optax from the wheels in .whl/
# (git-ignored: optax, chex, toolz, absl-py; carry .whl), then bench_cross_entropy.py (device
# time; 8192 rows x 32000/128256/256000 bf16 against optax and the jnp form). Everything is
# written to $OUT; the benchmark gets what is left of 230 s from the build's start
# (BENCH_TIMEOUT overrides), and writes its files after every shape.
#   COMMIT=<hash> names the commit measured (the device tree's .git may be stale).
#   BENCH_ARGS: e.g. --vocabs 128256 --dtypes bfloat16,float32; TESTS=0 skips the tests.
source "$(dirname "$0")/gpu_setup.sh"
if ls .whl/optax-*.whl >/dev/null 2>&1; then
  # Pure-Python wheels, nothing fetched; jax and numpy are the machine's.
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-ce \
    .whl/optax-*.whl .whl/chex-*.whl .whl/toolz-*.whl .whl/absl_py-*.whl 2>&1 | tail -2
  export PYTHONPATH=/tmp/site-ce${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -c "import optax; print('optax', optax.__version__)" 2>&1 | tail -1
if [ "${TESTS:-1}" = 1 ]; then
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 timeout ${TEST_TIMEOUT:-100} python3 -m pytest -q -n 8 -p no:benchmark \
    ${PYTEST_ARGS:-tests/test_cross_entropy.py tests/test_ffi_targets.py tests/test_export.py tests/test_softmax.py} 2>&1 |
    tee "$OUT/pytest-cross-entropy.log" | tail -4
fi
XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.8} \
  timeout ${BENCH_TIMEOUT:-$(( 230 - $(date +%s) + t0 ))} python3 benchmarks/bench_cross_entropy.py --out "$OUT" ${BENCH_ARGS:-} 2>&1 |
  tee "$OUT/bench-cross-entropy.log" | tail -30
