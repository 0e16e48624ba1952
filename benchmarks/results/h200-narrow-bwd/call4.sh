# The whole suite on main's kernels (94ad3dc's, the TEMP modes of calls 1-3 taken out), with the
# new wide-row determinism test; the partials set of ab_norm_bwd.py (wide staged and held tiles,
# each case run twice and compared bit for bit); then the main job.
# Run from the repository root: bash benchmarks/results/h200-narrow-bwd/call4.sh
set -u
export COMMIT=${COMMIT:-unknown} OUT=${OUT:-/tmp/out}
STAGES="build test" TEST_TIMEOUT=330 bash benchmarks/gpu_run.sh 2>&1 | tail -n 12
XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 timeout 70 python3 benchmarks/ab_norm_bwd.py rep /tmp/ab partials 2>&1 \
  | grep -v Warn | tail -n 16 | tee $OUT/ab-partials.log
left=$(( 575 - SECONDS )); [ $left -gt 150 ] && left=150
timeout $left python3 -m jaxnorm > $OUT/main.log 2>&1; echo "main rc=$? ($left s allowed)"
grep -E "FAIL|OK:|custom call" $OUT/main.log | tail -n 5
echo "total $SECONDS s"
