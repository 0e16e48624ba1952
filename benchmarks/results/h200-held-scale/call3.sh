# The merged tree (LayerNorm's wide backward tiles hold the scale; the general sampler's maximum by
# st.async): the whole suite, the norms against XLA in device time (bench.py, bf16, forward and
# forward+backward), the sampling quick benchmark, then the main job while the call has time.
# Run from the repository root: COMMIT=<hash> bash benchmarks/results/h200-held-scale/call3.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/rows" "$OUT/sampling"
exec > >(tee -a $OUT/log.txt) 2>&1
echo "commit $COMMIT"
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
t0=$SECONDS; timeout 330 python3 -m pytest -q -n 16 -p no:benchmark tests > $OUT/pytest.log 2>&1
tail -n 2 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -20; echo "suite $((SECONDS - t0)) s"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.5
timeout 70 python3 benchmarks/bench.py --timer device --impls jaxnorm,xla --no-tokamax --ops layer_norm,rms_norm \
  --dtypes bfloat16 --directions fwd,fwd+bwd --widths 4096,16384,32768,65536,131072,262144 --small none --budget 60 \
  --out $OUT/rows > $OUT/rows/bench.log 2>&1; echo "rows rc=$? $SECONDS s"
grep -E "copy|^\| bfloat16 \| \w+ \| fwd" $OUT/rows/bench.md | head -30
timeout $((560 - SECONDS)) python3 benchmarks/bench_sampling.py --out $OUT/sampling --quick > $OUT/sampling/bench.log 2>&1
echo "sampling rc=$? $SECONDS s"
grep -E 'ceiling|checks|top_k=50 |top_p=0.9 |top_k=50,top_p|top_k op|min_p|no filter' $OUT/sampling/bench.log | head -40
rm -f $OUT/rows/bench.png $OUT/sampling/*.png
[ $SECONDS -lt 480 ] && { t0=$SECONDS; timeout $((590 - SECONDS)) python3 -m jaxnorm > $OUT/main-job.log 2>&1; echo "main job rc=$? $((SECONDS - t0)) s"; }
echo "total $SECONDS s"
