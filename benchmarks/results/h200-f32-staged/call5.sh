# Call 5 of h200-f32-staged (a fresh machine; carry abtree/, the base tree 89eeb2d): 535299a's
# float32 LayerNorm at 262144 columns ran staged with one row buffer (0.87-0.94x); here it holds
# its scale alone beside two. Both trees built, the norm tests on the new one, the float32 norm
# forwards (and forward+backward at 262144) two rounds a side.
# From the repository root: COMMIT=<hash> BASE=<hash> bash benchmarks/results/h200-f32-staged/call5.sh
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
t0=$SECONDS
PYTHONPATH=/tmp/m1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 200 \
  python3 -m pytest -q -n 16 -p no:cacheprovider -p no:benchmark $R/tests/test_norm.py $R/tests/test_add_norm.py \
  "$R/tests/test_ops.py::test_cluster_workers_take_many_rows" > $L/pytest-m1.log 2>&1
echo "pytest rc=$? $((SECONDS - t0)) s: $(tail -n 1 $L/pytest-m1.log)"; grep -E "^(FAILED|ERROR)" $L/pytest-m1.log | head -20
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
run() { [ $SECONDS -gt ${AB_UNTIL:-520} ] && { echo "skip $1$2 $3"; return; }
  PYTHONPATH=/tmp/$1 OUT=$L timeout 100 python3 $R/benchmarks/ab_rows.py $1$2 $3 float32 $4 2>&1 \
    | grep -v Warn >> $L/ab.log; }
for i in 1 2; do for m in m0 m1; do run $m r$i 262144,64x262144 layer_norm,layer_norm+bwd; done; done
for i in 1 2; do for m in m0 m1; do run $m s$i 16384,65536,131072,262144 rms_norm,layer_norm; done; done
python3 $R/benchmarks/ab_rows.py --compare $L/ab.log m0 m1 | tee $OUT/ab-summary.txt
echo "total $SECONDS s"
