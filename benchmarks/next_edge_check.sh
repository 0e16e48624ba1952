#!/usr/bin/env bash
# TEMP (branch next/one-read-prefetch): was the fast-log noise near u = 1 live on the GPU? Builds a
# copy of this tree with gumbel_score as it was before 7b588c0 (__logf(-__logf(u))), runs the edge
# test there (expected to fail if __logf(1 - 2^-24) returned 0), then this tree: the edge test, the
# family's tests and the quick benchmark (the fix's cost).
set -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
rm -rf /tmp/old && cp -r . /tmp/old && rm -rf /tmp/old/build
python3 - <<'PY'
p = '/tmp/old/ffi_src/cuda/sampling/select_common.cuh'
s = open(p).read()
s = s.replace('return s - __logf(neg_log_uniform(open_uniform(word)));', 'return s - __logf(-__logf(open_uniform(word)));')
assert '-__logf(open_uniform(word))' in s
open(p, 'w').write(s)
PY
(cd /tmp/old && JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q -e . 2>&1 | tail -2)
(cd /tmp/old && timeout 120 python3 -m pytest -q -p no:benchmark tests/test_sampling.py -k "largest_uniform or documented_philox" > $OUT/edge-old.log 2>&1; tail -n 3 $OUT/edge-old.log)
source benchmarks/gpu_setup.sh
timeout 200 python3 -m pytest -q -n 14 -p no:benchmark tests/test_sampling.py tests/test_ffi_targets.py tests/test_export.py tests/test_decode_example.py > $OUT/pytest-sampling.log 2>&1; tail -n 1 $OUT/pytest-sampling.log
grep -E '^(FAILED|ERROR)' $OUT/pytest-*.log | head
timeout 200 python3 benchmarks/bench_sampling.py --out "$OUT" --quick > "$OUT/bench-sampling.log" 2>&1; grep -E 'ceiling|checks|B=64 .*(top_k=50 |top_p=0.9 |no filter|min_p)' "$OUT/bench-sampling.log" | head -20
echo "total $SECONDS s"
