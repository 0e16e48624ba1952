#!/usr/bin/env bash
# One GPU call, two builds: a base tree in abtree/ (made here by
#   rm -rf abtree && mkdir abtree && git archive BASE ffi_src jaxnorm CMakeLists.txt pyproject.toml README.md | tar -x -C abtree
# and left untracked, so it travels) and this tree, each installed (not editable) into its own
# directory and imported by PYTHONPATH from outside the repository. Then the row families' tests on
# this tree's build and benchmarks/ab_norm_bwd.py's SET, two rounds a side (m0: base, m1: this tree).
#
#   COMMIT=<hash> BASE=<hash> SET=<set> bash benchmarks/ab_two_builds.sh
#
# With ROWS="WIDTHS DTYPES OPS" it times benchmarks/ab_rows.py's forwards (or +bwd) instead, each
# ROWS2.. a further set, every set two rounds a side in the order m0 m1 m1 m0:
#
#   COMMIT=<hash> BASE=<hash> ROWS="262144,64x262144 float32 rms_norm,layer_norm" bash benchmarks/ab_two_builds.sh
#
# A second base tree in abtree2/ (made the same way, or copied and edited) is built and timed too,
# as m2, in every set (order m0 m1 m2 m2 m1 m0). With both ROWS and SET, the SET runs follow.
#
# Use it where the new side changes device code that a runtime switch would share with the old
# side: a switch puts both paths in every kernel, and that alone moved main's bf16 RMSNorm backward
# by 3.7% at 1024 columns (results/h200-lean-bwd). Switches picking among kernels at launch are
# free of that (ab_norm_bwd.sh). Only the summary and the logs' tarball come back ($OUT).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=$PWD L=/tmp/ablogs
# A warm machine keeps the builds (pip --target would not replace them): REUSE_M0=1 keeps the
# base's build where the previous call made it from the same abtree/.
[ "${REUSE_M0:-0}" = 1 ] && [ -f /tmp/m0/jaxnorm/__init__.py ] || REUSE_M0=0
rm -rf $L /tmp/m1 /tmp/m2 /tmp/ab; [ "$REUSE_M0" = 1 ] || rm -rf /tmp/m0; mkdir -p $L
[ -n "${ROWS:-}" ] || : "${SET:?SET or ROWS: what to time}"
echo "new $COMMIT, base $BASE, set ${SET:-rows: $ROWS}" | tee "$OUT/commit.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
[ -f abtree/pyproject.toml ] || { echo "no abtree/: see the header"; exit 1; }
t0=$(date +%s)
build() { JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q --target /tmp/$1 $2 > $L/build-$1.log 2>&1
  local rc=$?; echo "$1 build rc=$rc $(( $(date +%s) - t0 )) s"; return $rc; }
SIDES="m0 m1"; [ -f abtree2/pyproject.toml ] && SIDES="m0 m1 m2"
if [ "$REUSE_M0" = 1 ]; then echo "m0 kept from the previous call"; (exit 0) & pid=$!; else build m0 ./abtree & pid=$!; fi
[ "$SIDES" = "m0 m1" ] || { build m2 ./abtree2 & pid2=$!; }
build m1 . || { tail -20 $L/build-m1.log; exit 1; }
wait $pid || { tail -20 $L/build-m0.log; exit 1; }
[ -z "${pid2:-}" ] || wait $pid2 || { tail -20 $L/build-m2.log; exit 1; }
cd /tmp
for m in $SIDES; do
  PYTHONPATH=/tmp/$m python3 -c "import jaxnorm, jaxnorm._ffi as f; print('$m', jaxnorm.__file__, 'cuda', f.cuda_built())" 2>&1 | tail -1
done
[ "${TEST_TIMEOUT:-150}" = 0 ] || PYTHONPATH=/tmp/m1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false timeout ${TEST_TIMEOUT:-150} \
  python3 -m pytest -q -n 16 -p no:cacheprovider -p no:benchmark ${TESTS:-$R/tests/test_norm.py $R/tests/test_add_norm.py \
  $R/tests/test_transforms.py $R/tests/test_forward_mode.py} > $L/pytest-m1.log 2>&1
[ "${TEST_TIMEOUT:-150}" = 0 ] || tail -n 1 $L/pytest-m1.log; grep -sE "^(FAILED|ERROR)" $L/pytest-m1.log | head -20
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
# A run takes ~20-50 s (100 s at most): AB_UNTIL leaves the rest within the call's 600 s.
run() { [ $SECONDS -gt ${AB_UNTIL:-440} ] && { echo "skip $1$2"; return; }
  PYTHONPATH=/tmp/$1 timeout 100 python3 $R/benchmarks/ab_norm_bwd.py $1$2 /tmp/ab $SET 2>&1 | grep -v Warn >> $L/ab.log; }
rows() { [ $SECONDS -gt ${AB_UNTIL:-440} ] && { echo "skip $1$2"; return; }
  PYTHONPATH=/tmp/$1 OUT=$L timeout 100 python3 $R/benchmarks/ab_rows.py $1$2 $3 2>&1 | grep -v Warn >> $L/ab.log; }
if [ -n "${ROWS:-}" ]; then
  k=0
  for set in "$ROWS" ${ROWS2:+"$ROWS2"} ${ROWS3:+"$ROWS3"}; do
    k=$((k + 1)); for m in $SIDES; do rows $m s${k}r1 "$set"; done
    for m in $(echo $SIDES | tr ' ' '\n' | tac); do rows $m s${k}r2 "$set"; done
  done
  python3 $R/benchmarks/ab_rows.py --compare $L/ab.log $SIDES | tee $OUT/ab-summary.txt
fi
if [ -n "${SET:-}" ]; then
  for m in $SIDES; do run $m r1; done
  for m in $(echo $SIDES | tr ' ' '\n' | tac); do run $m r2; done
  grep "NOT REPRODUCIBLE" $L/ab.log
  for m in ${SIDES#m0 }; do python3 $R/benchmarks/ab_norm_bwd.py --compare /tmp/ab m0 $m | tee -a $OUT/ab-summary.txt; done
fi
cp /tmp/ab/*.json $L/ 2>/dev/null
tar -czf $OUT/logs.tgz -C $L .
echo "total $SECONDS s"
