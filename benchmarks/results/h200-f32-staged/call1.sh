# Call 1 of h200-f32-staged: QuACK's small wheels and first cu13 part kept in /tmp (carry .whl and
# abtree/, the base tree: see ../../ab_two_builds.sh), the base (m0) and this tree (m1) built into
# /tmp/m0 and /tmp/m1, the norm tests on m1, then the float32 norm forwards, two rounds a side
# (ab_rows.py). From the repository root: COMMIT=<hash> BASE=<hash> bash benchmarks/results/h200-f32-staged/call1.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
export PYTHONUNBUFFERED=1
echo "new $COMMIT, base $BASE" | tee "$OUT/commit.txt"
mkdir -p /tmp/quack-whl; cp .whl/*.whl /tmp/quack-whl/; cp .whl/cu13.txz.part00 .whl/cu13.txz.nparts /tmp/
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
R=$PWD L=$OUT/logs; rm -rf /tmp/m0 /tmp/m1; mkdir -p $L
build() { JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q --target /tmp/$1 $2 > $L/build-$1.log 2>&1
  local rc=$?; echo "$1 build rc=$rc ${SECONDS} s"; return $rc; }
build m0 ./abtree & pid=$!
build m1 . || { tail -20 $L/build-m1.log; exit 1; }
wait $pid || { tail -20 $L/build-m0.log; exit 1; }
cd /tmp
for m in m0 m1; do
  PYTHONPATH=/tmp/$m python3 -c "import jaxnorm, jaxnorm._ffi as f; print('$m', jaxnorm.__file__, 'cuda', f.cuda_built())" 2>&1 | tail -1
done
t0=$SECONDS
PYTHONPATH=/tmp/m1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 200 \
  python3 -m pytest -q -n 16 -p no:cacheprovider -p no:benchmark $R/tests/test_norm.py \
  "$R/tests/test_ops.py::test_cluster_workers_take_many_rows" > $L/pytest-m1.log 2>&1
echo "pytest rc=$? $((SECONDS - t0)) s: $(tail -n 1 $L/pytest-m1.log)"; grep -E "^(FAILED|ERROR)" $L/pytest-m1.log | head -20
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
W=16384,32768,65536,131072,262144,4096,64x262144,16x131072
run() { [ $SECONDS -gt ${AB_UNTIL:-500} ] && { echo "skip $1$2"; return; }
  PYTHONPATH=/tmp/$1 OUT=$L timeout 100 python3 $R/benchmarks/ab_rows.py $1$2 $W float32 rms_norm,layer_norm 2>&1 \
    | grep -v Warn >> $L/ab.log; }
for i in 1 2; do run m0 r$i; run m1 r$i; done
PYTHONPATH=/tmp/m1 OUT=$L timeout 60 python3 $R/benchmarks/ab_rows.py m1c 262144 bfloat16 rms_norm 2>&1 | grep -v Warn >> $L/ab.log
python3 $R/benchmarks/ab_rows.py --compare $L/ab.log m0 m1 | tee $OUT/ab-summary.txt
echo "total $SECONDS s"
