# The merge of next-batch1-chain's two patches (8a02fa1): the whole suite (which also covers
# ead30dd and 2d8a752, never run on a GPU before), the sampling quick benchmark, the main job.
#   COMMIT=<hash> bash benchmarks/results/h200-batch1-chain/call2.sh
OUT=${OUT:-/tmp/out}; W=/tmp/w; mkdir -p "$OUT" $W/sampling
COMMIT=$COMMIT STAGES="build test" TEST_TIMEOUT=340 OUT=$W bash benchmarks/gpu_run.sh 2>&1 | tail -25
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 110 python3 benchmarks/bench_sampling.py --out $W/sampling --quick > $W/sampling/bench.log 2>&1
echo "sampling rc=$? $SECONDS s"
grep -E 'ceiling|checks|top_k=50 |top_p=0.9 |top_k=50,top_p|top_k op|min_p|no filter' $W/sampling/bench.log | head -40
left=$((580 - SECONDS)); if [ $left -gt 30 ]; then
  timeout $left python3 -m jaxnorm > $W/main.log 2>&1; echo "main rc=$? $SECONDS s"
  grep -cE "PASS" $W/main.log; grep -E "FAIL" $W/main.log | head; fi
rm -f $W/sampling/*.png; tar czf $OUT/files.tgz -C $W .; echo "total $SECONDS s"
