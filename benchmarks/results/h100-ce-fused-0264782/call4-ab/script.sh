OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_PREALLOCATE=false
XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 timeout 130 python3 -m pytest -q -n 12 -rf --tb=short -p no:benchmark tests/test_cross_entropy.py tests/test_ffi_targets.py tests/test_export.py tests/test_softmax.py tests/test_norm.py > $OUT/pytest.log 2>&1
tail -n 1 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -10
JAXNORM_TEMP_CE_STREAM=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 timeout 60 python3 -m pytest -q -n 12 -rf --tb=short -p no:benchmark tests/test_cross_entropy.py -k reduced > $OUT/pytest-stream.log 2>&1
tail -n 1 $OUT/pytest-stream.log; grep -E "^(FAILED|ERROR)" $OUT/pytest-stream.log | head -5
echo "tests done $SECONDS"
mkdir -p /tmp/ab
ab() { local lab=$1; shift; env "$@" XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 timeout 100 python3 .scratch/ce_ab.py $lab /tmp/ab 2>&1 | grep -v "^W1\|alloc\|Current\|If this" >> $OUT/ab.log; echo "$lab done $SECONDS"; }
ab held1 X=1
ab stream1 JAXNORM_TEMP_CE_STREAM=1
[ $SECONDS -lt 420 ] && ab held2 X=1
grep -E "fused|two" $OUT/ab.log | awk '{print $1,$2,$3,$4,$5,$6,$7,$8}'
cp /tmp/ab/*.json $OUT/ 2>/dev/null
timeout $((560 - SECONDS)) ncu --kernel-name regex:fwd_grad --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats python3 .scratch/ce_ncu.py 8192 128256 bfloat16 > $OUT/ncu-fused.txt 2>&1
grep -E "Duration|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Warp Cycles Per Issued" $OUT/ncu-fused.txt | head
echo "total $SECONDS s"
