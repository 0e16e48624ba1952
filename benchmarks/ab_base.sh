#!/usr/bin/env bash
# Same-call A/B of this tree against a base source tree, on the GPU machine:
#
#   BASE=.scratch/base bash benchmarks/ab_base.sh 'TIMING COMMAND'     (carry .scratch/base)
#
# BASE holds the base's versions of the files that differ, at their repository paths (for
# example `git archive <base> ffi_src | tar -x -C .scratch/base`). A copy of this tree with BASE
# laid over it and this tree are built once each; then each is installed and timed in turn, twice
# (LABEL base1, new1, base2, new2), by TIMING COMMAND run in this tree with $LABEL set and
# OUT=/tmp/ab (where it leaves its results). The timings' log: $OUT/ab.log. LIMIT (seconds) skips
# the runs that would start later. Ends with this tree installed. Sampling:
#
#   BASE=.scratch/base bash benchmarks/ab_base.sh \
#     'python3 benchmarks/ab_sampling.py $LABEL 1,8,64,256 float32,bfloat16 "top_k=50;top_k=50,top_p=0.9"'
#   python3 benchmarks/ab_sampling.py --compare /tmp/ab base new
set -o pipefail
: "${BASE:?BASE: the base files}"
TIMING=${1:?the timing command}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/ab; rm -f /tmp/ab/*
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
here=$PWD
rm -rf /tmp/base && cp -r . /tmp/base && rm -rf /tmp/base/build && cp -r "$BASE"/. /tmp/base/
install() {  # the editable install points at the tree built last
  local t0=$SECONDS
  (cd "$1" && JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q -e . > "$OUT/build-$2.log" 2>&1) \
    || { tail -5 "$OUT/build-$2.log"; exit 1; }
  echo "build $2: $((SECONDS - t0)) s"
}
install /tmp/base base && install "$here" new
bash benchmarks/build_profile.sh
for i in 1 2; do
  for tree in base new; do
    [ $SECONDS -gt ${LIMIT:-480} ] && { echo "skip $tree$i"; continue; }
    install "$([ $tree = base ] && echo /tmp/base || echo "$here")" $tree > /dev/null
    (LABEL=$tree$i OUT=/tmp/ab timeout 120 bash -c "$TIMING" 2>&1 | grep -v Warn >> "$OUT/ab.log")
  done
done
install "$here" new > /dev/null
echo "total $SECONDS s"
