#!/usr/bin/env bash
# Same-call A/B of the sampling kernels against a base source tree, on the GPU machine:
#
#   BASE=.scratch/base COMMIT=<hash> bash benchmarks/ab_sampling_base.sh   (carry .scratch/base)
#
# BASE holds the base's versions of the files that differ, at their repository paths (for
# example `git archive <base> ffi_src | tar -x -C .scratch/base`). A copy of this tree with BASE
# laid over it is built and timed first, then this tree, each twice in turn (runs labelled base1,
# new1, base2, new2), by ab_sampling.py over BATCHES x DTYPES x METHODS x VOCABS (environment,
# defaults below); `ab_sampling.py --compare` then gives the best of each as new / base. Then
# this tree's sampling tests. LIMIT (seconds) skips the runs that would start later.
set -o pipefail
: "${BASE:?BASE: the base files}"
BATCHES=${BATCHES:-1,8,64,256} DTYPES=${DTYPES:-float32,bfloat16} VOCABS=${VOCABS:-128256}
METHODS=${METHODS:-top_k=50;top_k=50,top_p=0.9}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/ab; rm -f /tmp/ab/*
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
here=$PWD
rm -rf /tmp/base && cp -r . /tmp/base && rm -rf /tmp/base/build && cp -r "$BASE"/. /tmp/base/
build() {  # the editable install points at the tree built last
  local t0=$SECONDS
  (cd "$1" && JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q -e . > "$OUT/build-$2.log" 2>&1) \
    || { tail -5 "$OUT/build-$2.log"; exit 1; }
  echo "build $2: $((SECONDS - t0)) s"
}
ab() {
  [ $SECONDS -gt ${LIMIT:-480} ] && { echo "skip $2"; return; }
  (cd "$1" && OUT=/tmp/ab timeout 90 python3 "$here/benchmarks/ab_sampling.py" "$2" "$BATCHES" "$DTYPES" "$METHODS" "$VOCABS" 2>&1 \
    | grep -v Warn >> "$OUT/ab.log")
}
# Both trees built once; each run re-installs its tree (seconds: the objects are built).
build /tmp/base base && build "$here" new
for i in 1 2; do
  build /tmp/base base > /dev/null && ab /tmp/base "base$i"
  build "$here" new > /dev/null && ab "$here" "new$i"
done
python3 benchmarks/ab_sampling.py --compare /tmp/ab base new | tee "$OUT/ab-summary.txt"
echo "checks failed: $(grep -c 'CHECK FAILED' "$OUT/ab.log")"
timeout 120 python3 -m pytest -q -n 14 -p no:benchmark tests/test_sampling.py > "$OUT/pytest-sampling.log" 2>&1
tail -n 1 "$OUT/pytest-sampling.log"
echo "total $SECONDS s"
