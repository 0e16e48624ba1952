# The merged tree: QuACK's small wheels and first cu13 part kept in /tmp (carry .whl), the build,
# the whole suite, then the main job while the call has time. Call 3 (gpu_rows.sh, carry .whl2
# with WHL_DIR=.whl2) follows on the same warm machine.
# Run from the repository root: COMMIT=<hash> bash benchmarks/results/h200-staged-2cta/call2.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a $OUT/log.txt) 2>&1
echo "commit $COMMIT"
mkdir -p /tmp/quack-whl; cp .whl/*.whl /tmp/quack-whl/; cp .whl/cu13.txz.part00 /tmp/; ls /tmp/quack-whl | wc -l
source benchmarks/gpu_setup.sh
bash benchmarks/build_profile.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
t0=$SECONDS; timeout 400 python3 -m pytest -q -n 16 -p no:benchmark tests > $OUT/pytest.log 2>&1
tail -n 2 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -20; echo "suite $((SECONDS - t0)) s"
[ $SECONDS -lt 470 ] && { t0=$SECONDS; timeout $((585 - SECONDS)) python3 -m jaxnorm > $OUT/main-job.log 2>&1; echo "main job rc=$? $((SECONDS - t0)) s"; tail -3 $OUT/main-job.log; }
echo "total $SECONDS s"
