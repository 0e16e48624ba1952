# A = this tree; H = -DJAXNORM_SOFTMAX_HELD=1. A-H-A-H, then H's softmax tests and A's norm tests.
set -o pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p $OUT; T0=$(date +%s)
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
rm -rf /tmp/treeH /tmp/buildH; mkdir -p /tmp/treeH; cp -r CMakeLists.txt ffi_src /tmp/treeH/
(cmake -S /tmp/treeH -B /tmp/buildH -DSKBUILD_PROJECT_NAME=jaxnorm -DJAXNORM_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
   "-DCMAKE_CUDA_FLAGS=-DJAXNORM_SOFTMAX_HELD=1" -DPython_EXECUTABLE=$(which python3) > /tmp/cmakeH.log 2>&1 &&
 cmake --build /tmp/buildH --target _jaxnorm_cuda -j 7 >> /tmp/cmakeH.log 2>&1; echo "H build rc=$? at $(( $(date +%s) - T0 )) s") &
COMMIT=${COMMIT} source benchmarks/gpu_setup.sh
wait
SO=$(python3 -c "import jaxnorm._jaxnorm_cuda as m; print(m.__file__)")
cp $SO /tmp/so_A; cp /tmp/buildH/_jaxnorm_cuda*.so /tmp/so_H || { tail -20 /tmp/cmakeH.log; exit 1; }
export XLA_PYTHON_CLIENT_PREALLOCATE=false
run() {  # tag widths dtypes ops dirs
  [ $(left) -lt 150 ] && { echo "skip $1: $(left) s left"; return; }
  cp /tmp/so_${1:0:1} $SO
  timeout 100 python3 .scratch/rows/rows_dt.py $1 $2 $3 $4 $5 jaxnorm > $OUT/rows-$1.log 2>&1
  echo "$1 rc=$? at $(( $(date +%s) - T0 )) s"
}
W=16384,32768,65536,131072,262144
run A $W bfloat16 softmax,log_softmax fwd,fwd+bwd
run H $W bfloat16 softmax,log_softmax fwd,fwd+bwd
run A2 16384,32768 float32 softmax fwd
run H2 16384,32768 float32 softmax fwd
run A3 $W bfloat16 softmax fwd
run H3 $W bfloat16 softmax fwd
BASE=A python3 .scratch/rows/ab_table.py
cp /tmp/so_H $SO
timeout $(( $(left) - 60 )) python3 -m pytest -q -n 14 -p no:benchmark tests/test_softmax.py tests/test_ops.py -k "softmax" > $OUT/pytest-H.log 2>&1
echo "pytest H rc=$? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest-H.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-H.log | head -10
cp /tmp/so_A $SO
timeout $(( $(left) - 5 )) python3 -m pytest -q -n 14 -p no:benchmark tests/test_norm.py tests/test_add_norm.py > $OUT/pytest-A.log 2>&1
echo "pytest A rc=$? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest-A.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-A.log | head -10
