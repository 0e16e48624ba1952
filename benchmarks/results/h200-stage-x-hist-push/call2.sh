# NOTE: this call hung at its bare `wait` (it also waits on the exec's tee process substitution) until the 600 s limit; use `wait $pid`.
# main with the gather's histogram exchanged by st.async (hist-push): the sampling quick benchmark;
# then the same tree with trace-on-hist-push.patch (the 2026-11-29 clock trace rebased onto it)
# rebuilt and traced at batch 1 and 8 (trace.sh); FlashInfer 0.6.13's
# anchor (benchmarks/anchors/flashinfer_sampling.cu, headers carried in .scratch/fi/include,
# built beside the project) by CUDA events and by Nsight Compute, on this H200 for the first time.
#   COMMIT=<hash> bash benchmarks/results/h200-stage-x-hist-push/call2.sh      (carry .scratch)
OUT=${OUT:-/tmp/out}; W=/tmp/w; mkdir -p "$OUT" $W/sampling
exec > >(tee -a $OUT/log.txt) 2>&1
nvcc -O3 -std=c++17 -arch=sm_90a -I.scratch/fi/include benchmarks/anchors/flashinfer_sampling.cu -o $W/fis -lcurand \
  > $W/fis_build.log 2>&1 &
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 90 python3 benchmarks/bench_sampling.py --out $W/sampling --quick > $W/sampling/bench.log 2>&1
echo "sampling rc=$? $SECONDS s"
grep -E 'ceiling|checks|top_k=50 |top_p=0.9 |top_k=50,top_p|top_k op|min_p|no filter' $W/sampling/bench.log | head -40
patch -p1 < benchmarks/results/h200-stage-x-hist-push/trace-on-hist-push.patch && echo "trace patch applied"
bash benchmarks/results/h200-stage-x-hist-push/trace.sh; echo "trace done $SECONDS s"
wait; tail -3 $W/fis_build.log
if [ -x $W/fis ]; then
  timeout 90 $W/fis > $OUT/flashinfer-events.log 2>&1; echo "fis rc=$? $SECONDS s"
  FIS_REPS=2 timeout $((585 - SECONDS)) ncu --csv --metrics gpu__time_duration.sum --cache-control all --clock-control none \
      --log-file $W/flashinfer-ncu.csv $W/fis > $W/flashinfer-ncu.out 2> $W/flashinfer-ncu.err
  echo "ncu rc=$? $SECONDS s"; tail -2 $W/flashinfer-ncu.err
  python3 benchmarks/flashinfer_ncu.py $W/flashinfer-ncu.out $W/flashinfer-ncu.csv > $OUT/flashinfer-ncu.md; cat $OUT/flashinfer-ncu.md
fi
rm -f $W/fis $W/sampling/*.png; tar czf $OUT/files.tgz -C $W .
echo "total $SECONDS s"
