#!/usr/bin/env bash
# Nsight Compute of the sampling kernel (one launch each) at 64 x 128256 float32.
set -o pipefail
OUT=${OUT:-/tmp/out}
for w in top_p top_k top_k_op=1024; do
  ncu -k regex:select_rows --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
      python3 benchmarks/profile_sampling.py "$w" > "$OUT/ncu-$w.txt" 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Cluster Size|Warp Cycles Per Issued|Stall|Block Limit Shared" "$OUT/ncu-$w.txt" | head -20
done
