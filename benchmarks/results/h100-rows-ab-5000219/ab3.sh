# v11 final A/B: E = this tree; A = 983b6dc's kernels (.scratch/a983), built by CMake. Then row tests.
set -o pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p $OUT; T0=$(date +%s)
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
rm -rf /tmp/buildA
(cmake -S .scratch/a983 -B /tmp/buildA -DSKBUILD_PROJECT_NAME=jaxnorm -DJAXNORM_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
   -DPython_EXECUTABLE=$(which python3) > /tmp/cmakeA.log 2>&1 && cmake --build /tmp/buildA --target _jaxnorm_cuda -j 7 >> /tmp/cmakeA.log 2>&1
 echo "A build rc=$? at $(( $(date +%s) - T0 )) s") &
COMMIT=${COMMIT} source benchmarks/gpu_setup.sh
wait
SO=$(python3 -c "import jaxnorm._jaxnorm_cuda as m; print(m.__file__)")
cp $SO /tmp/so_E; cp /tmp/buildA/_jaxnorm_cuda*.so /tmp/so_A || { tail -20 /tmp/cmakeA.log; exit 1; }
export XLA_PYTHON_CLIENT_PREALLOCATE=false
run() {  # tag widths dtypes ops dirs
  [ $(left) -lt 60 ] && { echo "skip $1: $(left) s left"; return; }
  cp /tmp/so_${1:0:1} $SO
  timeout $(( $(left) > 150 ? 150 : $(left) )) python3 .scratch/rows/rows_dt.py $1 $2 $3 $4 $5 jaxnorm > $OUT/rows-$1.log 2>&1
  echo "$1 rc=$? at $(( $(date +%s) - T0 )) s"
}
W=16384,32768,65536,131072,262144
run A $W bfloat16 softmax,log_softmax,rms_norm,layer_norm fwd,fwd+bwd
run E $W bfloat16 softmax,log_softmax,rms_norm,layer_norm fwd,fwd+bwd
run a 16384,32768,131072 float32 softmax,rms_norm,layer_norm fwd
run e 16384,32768,131072 float32 softmax,rms_norm,layer_norm fwd
cp /tmp/so_E $SO
BASE=A python3 .scratch/rows/ab_table.py
timeout $(( $(left) - 10 )) python3 -m pytest -q -n 14 -p no:benchmark tests/test_ops.py tests/test_norm.py tests/test_softmax.py \
  tests/test_add_norm.py tests/test_cross_entropy.py > $OUT/pytest-rows.log 2>&1
echo "pytest rc=$? at $(( $(date +%s) - T0 )) s: $(tail -1 $OUT/pytest-rows.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-rows.log | head -20
