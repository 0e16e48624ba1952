# The merged tree (staged RMSNorm backward where workers have several rows): the whole suite, the
# norms' forward+backward against XLA in device time (bench.py), the A/B shapes of call 1 on this
# tree alone, then the main job while the call has time.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/rows"
exec > >(tee -a $OUT/log.txt) 2>&1
echo "commit $COMMIT"
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
t0=$SECONDS; timeout 330 python3 -m pytest -q -n 16 -p no:benchmark tests > $OUT/pytest.log 2>&1
tail -n 2 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -20; echo "suite $((SECONDS - t0)) s"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.5
timeout 60 python3 benchmarks/bench.py --timer device --impls jaxnorm,xla --no-tokamax --ops layer_norm,rms_norm \
  --dtypes bfloat16 --directions fwd+bwd --widths 4096,16384,32768,65536,131072,262144 --small none --budget 50 \
  --out $OUT/rows > $OUT/rows/bench.log 2>&1; echo "rows rc=$? $SECONDS s"
grep -E "^\| bfloat16 \| \w+ \| fwd\+bwd \| [0-9]+ \|" $OUT/rows/bench.md | head -14
rm -f $OUT/rows/bench.png
timeout 40 python3 benchmarks/ab_rows.py merged 32768,65536,131072,262144,16x65536,64x131072 bfloat16 rms_norm+bwd,layer_norm+bwd 2>&1 | grep "^\["
rm -f $OUT/rows-*.json
t0=$SECONDS; timeout $((585 - SECONDS)) python3 -m jaxnorm > $OUT/main-job.log 2>&1; echo "main job rc=$? $((SECONDS - t0)) s"
grep -iE "self-check|FAIL" $OUT/main-job.log | head -4; tail -n 2 $OUT/main-job.log
echo "total $SECONDS s"
