# Call 7 of h200-f32-staged (a fresh machine; carry abtree/, the base tree d4e96ed): 16-bit RMSNorm's
# cluster tiles as 512 threads x 4 packs (one CTA an SM, as float32's 512-thread staged tiles that
# reached 4.0 TB/s), staged at every cluster size, against d4e96ed's one-shot 256x8 tiles (staged
# only in clusters of 16). Both trees built, the bf16 RMSNorm forwards two rounds a side, then the
# norm tests on the new tree in what the device time leaves.
# From the repository root: COMMIT=<hash> BASE=<hash> bash benchmarks/results/h200-f32-staged/call7.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
export PYTHONUNBUFFERED=1
echo "new $COMMIT, base $BASE" | tee "$OUT/commit.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
R=$PWD L=$OUT/logs; rm -rf /tmp/m0 /tmp/m1; mkdir -p $L
build() { JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q --target /tmp/$1 $2 > $L/build-$1.log 2>&1
  local rc=$?; echo "$1 build rc=$rc ${SECONDS} s"; return $rc; }
build m0 ./abtree & pid=$!
build m1 . || { tail -20 $L/build-m1.log; exit 1; }
wait $pid || { tail -20 $L/build-m0.log; exit 1; }
cd /tmp
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
run() { [ $SECONDS -gt ${AB_UNTIL:-290} ] && { echo "skip $1$2"; return; }
  PYTHONPATH=/tmp/$1 OUT=$L timeout 60 python3 $R/benchmarks/ab_rows.py $1$2 32768,65536,131072,262144,16384,64x262144 \
    bfloat16 rms_norm 2>&1 | grep -v Warn >> $L/ab.log; }
run m0 r1; run m1 r1; run m1 r2; run m0 r2
python3 $R/benchmarks/ab_rows.py --compare $L/ab.log m0 m1 | tee $OUT/ab-summary.txt
t0=$SECONDS
PYTHONPATH=/tmp/m1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false timeout $((335 - SECONDS)) \
  python3 -m pytest -q -n 16 -p no:cacheprovider -p no:benchmark $R/tests/test_norm.py > $L/pytest-m1.log 2>&1
echo "pytest rc=$? $((SECONDS - t0)) s: $(tail -n 1 $L/pytest-m1.log)"; grep -E "^(FAILED|ERROR)" $L/pytest-m1.log | head -20
echo "total $SECONDS s"
