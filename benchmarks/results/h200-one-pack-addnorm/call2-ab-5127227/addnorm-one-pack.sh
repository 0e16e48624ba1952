# Prepared for the next session (not run): one GPU call, one build of main with
# ../h200-narrow-bwd/narrow-modes.patch applied (its TEMP switch JAXNORM_TEMP_NARROW: unset or 0,
# main's kernels; 3, the norm backwards' 16-bit rows of 1024-4096 columns at one pack a thread,
# 1024 threads an SM).
#   1. Nsight Compute on main's bf16 RMSNorm backward at 131072 x 1024 (the 0.91x-QuACK miss):
#      speed of light, warp stall reasons, scheduler issue, memory workload.
#   2. The residual-add backward at one pack a thread against main's tiles, the case set
#      `addnorm_narrow` (1024-4096 columns, RMSNorm and LayerNorm, bf16, fp16, float32 h), two
#      rounds a side, outputs checked and run twice for the bits. Call 3 measured 0.894x at
#      32768 x 1024 bf16 RMSNorm; this decides whether that op alone takes the tile.
# The patch is applied to the device's copy only. Run from the repository root:
#   bash benchmarks/results/next-rows/addnorm-one-pack.sh
git apply benchmarks/results/h200-narrow-bwd/narrow-modes.patch || exit 1
source benchmarks/gpu_setup.sh
timeout 120 ncu -k regex:tile_bwd --launch-count 1 --section SpeedOfLight --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy \
  python3 benchmarks/profile_one.py rms_norm fwd+bwd 131072x1024 bfloat16 > $OUT/ncu-rms-bwd-1024.txt 2>&1
grep -E "Duration|Throughput|Stall|Issued|Eligible|Achieved Occupancy|Registers" $OUT/ncu-rms-bwd-1024.txt | head -40
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
run() { local lab=$1; shift; [ $SECONDS -gt 470 ] && { echo "skip $lab"; return; }
  env "$@" timeout 90 python3 benchmarks/ab_norm_bwd.py $lab /tmp/ab addnorm_narrow 2>&1 | grep -v Warn | tail -n 12 >> $OUT/ab.log; }
for i in 1 2; do run m0r$i JAXNORM_TEMP_NARROW=0; run m3r$i JAXNORM_TEMP_NARROW=3; done
grep "NOT REPRODUCIBLE" $OUT/ab.log
python3 benchmarks/ab_norm_bwd.py --compare /tmp/ab m0 m3 | tee $OUT/ab-summary.txt
echo "total $SECONDS s"
