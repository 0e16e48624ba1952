# Call 5 of h200-f32-bwd (warm, after call 4's QuACK install in /tmp/site-quack and call 2's build in
# the tree): Nsight Compute on bf16 RMSNorm forward at 4096 x 32768 (0.91x QuACK) and at 2048 x 65536
# (level), jaxnorm's kernel and QuACK's, to see what differs (lead C). From the repository root.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
S="${NCU_ARGS:-} --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis"
for s in ${SHAPES:-4096x32768 2048x65536}; do
  PYTHONPATH=$PWD timeout 120 ncu -k regex:"staged|tile_" --launch-count 1 $S python3 benchmarks/profile_one.py rms_norm fwd $s bfloat16 > $OUT/ncu-jaxnorm-$s.txt 2>&1
  r=${s%x*} c=${s#*x}
  [ "${QUACK:-1}" = 1 ] && SITE=/tmp/site-quack PYTHONPATH=/tmp/site-quack:/tmp/site-quack/nvidia_cutlass_dsl/dsl_packages timeout 150 ncu --launch-skip 2 --launch-count 2 $S \
    python3 -c "import torch; from quack.rmsnorm import rmsnorm_fwd
x=torch.randn($r,$c,device='cuda',dtype=torch.bfloat16); w=torch.ones($c,device='cuda')
for _ in range(3): rmsnorm_fwd(x, w, eps=1e-6)
torch.cuda.synchronize()" > $OUT/ncu-quack-$s.txt 2>&1
done
for f in $OUT/ncu-*.txt; do echo "== $f"; grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Size|Grid Size|Cluster Size|Shared Memory Configuration Size|Dynamic Shared|Warp Cycles Per Issued|Block Limit|Waves Per SM|L2 Hit|L1/TEX Hit|==ERR|rror" $f | head -30; done
