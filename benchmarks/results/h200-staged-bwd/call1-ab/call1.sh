# Same-call A/B on the H200: this tree (the norm backward's cluster tiles staged, row_tiles.cuh
# staged_bwd) against main's ffi_src (carried as .scratch/base-ffi_src.tar), then the tests of the
# changed families on this tree, and Nsight Compute of the bf16 512 x 262144 RMSNorm backward.
# Run from the repository root: COMMIT=<hash> BASE=<hash> bash benchmarks/results/h200-staged-bwd/call1-ab/call1.sh
# Prediction (count in h100-rows.md v29): bf16 norm fwd+bwd 0.80-0.90x the time at 131072-262144,
# 0.90-1.00x at 32768-65536; the backward at 512 x 262144 from 43.6% to >= 65% of DRAM throughput.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a $OUT/log.txt) 2>&1
echo "commit $COMMIT base $BASE"
here=$PWD
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r . /tmp/base && rm -rf /tmp/base/build /tmp/base/ffi_src \
  && (cd /tmp/base && tar -xf .scratch/base-ffi_src.tar) || exit 1
source benchmarks/gpu_setup.sh   # builds and installs this tree (new)
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
t0=$SECONDS
timeout 200 python3 -m pytest -q -n 16 -p no:benchmark tests/test_norm.py tests/test_add_norm.py tests/test_host_programs.py > $OUT/pytest.log 2>&1
tail -n 1 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -10
timeout 120 python3 -m pytest -q -n 16 -p no:benchmark tests/test_sampling.py -k "by_mass" >> $OUT/pytest.log 2>&1
tail -n 1 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | tail -n +1 | head -10; echo "tests (new) $((SECONDS - t0)) s"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.5
probe=benchmarks/results/h200-exchange-a56879a/call4-fwd/probe_bwd.py
ncu_bwd() {
  timeout 90 ncu --clock-control none --kernel-name regex:tile_bwd_kernel --launch-skip 2 --launch-count 1 \
    --section LaunchStats --section Occupancy --section SpeedOfLight python3 $probe 512x262144 > $OUT/ncu-$1.txt 2>&1
  echo "ncu $1 rc=$?"; grep -E "Grid Size|Cluster Size|Dynamic Shared|Registers Per|Achieved Occupancy|Duration|DRAM Throughput" $OUT/ncu-$1.txt | head -8
}
ncu_bwd new
inst() { local t0=$SECONDS; (cd "$1" && JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q -e . > "/tmp/inst-$2.log" 2>&1) || { tail -5 "/tmp/inst-$2.log"; exit 1; }; echo "install $2: $((SECONDS - t0)) s"; }
timing() {
  local t0=$SECONDS
  timeout 70 python3 benchmarks/ab_rows.py $1 32768,65536,131072,262144,16x65536,64x131072 bfloat16 rms_norm+bwd,layer_norm+bwd 2>&1 | grep "^\[" >> $OUT/ab.log
  timeout 40 python3 benchmarks/ab_rows.py $1 65536,262144 float16 rms_norm+bwd 2>&1 | grep "^\[" >> $OUT/ab.log
  echo "timing $1: $((SECONDS - t0)) s"
}
timing new0
inst /tmp/base base; timing base1
for r in 2 3; do
  [ $SECONDS -gt 470 ] && break
  inst "$here" new; timing new$r
  inst /tmp/base base; timing base$r
done
python3 benchmarks/ab_rows.py --compare $OUT/ab.log base new | tee $OUT/ab-rows.txt
[ $SECONDS -lt 540 ] && ncu_bwd base
rm -f $OUT/rows-*.json
echo "total $SECONDS s"
