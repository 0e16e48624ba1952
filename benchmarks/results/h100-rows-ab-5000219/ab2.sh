# v11 rule A/B: E = this tree (one-shot clusters <= 4, norm forwards 256x8 at 3 CTAs a SM);
# B = persistent clusters, 512x4 norm forwards (the old dispatch); F = every cluster one-shot;
# G = every cluster persistent (norms 256x8).
set -o pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p $OUT; T0=$(date +%s)
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
declare -A FL=([B]="-DJAXNORM_ONE_SHOT_MAX_CLUSTER=1 -DJAXNORM_NORM_FWD_CLUSTER_256=0" [F]="-DJAXNORM_ONE_SHOT_MAX_CLUSTER=16" [G]="-DJAXNORM_ONE_SHOT_MAX_CLUSTER=1")
for v in ${BUILDS:-B F G}; do
  rm -rf /tmp/tree$v /tmp/build$v; mkdir -p /tmp/tree$v; cp -r CMakeLists.txt ffi_src /tmp/tree$v/
  (cmake -S /tmp/tree$v -B /tmp/build$v -DSKBUILD_PROJECT_NAME=jaxnorm -DJAXNORM_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
     "-DCMAKE_CUDA_FLAGS=${FL[$v]}" -DPython_EXECUTABLE=$(which python3) > /tmp/cmake$v.log 2>&1 &&
   cmake --build /tmp/build$v --target _jaxnorm_cuda -j 5 >> /tmp/cmake$v.log 2>&1
   echo "$v build rc=$? at $(( $(date +%s) - T0 )) s") &
done
COMMIT=${COMMIT} source benchmarks/gpu_setup.sh
wait
SO=$(python3 -c "import jaxnorm._jaxnorm_cuda as m; print(m.__file__)")
cp $SO /tmp/so_E; for v in ${BUILDS:-B F G}; do cp /tmp/build$v/_jaxnorm_cuda*.so /tmp/so_$v || { tail -20 /tmp/cmake$v.log; exit 1; }; done
export XLA_PYTHON_CLIENT_PREALLOCATE=false
run() {  # tag widths ops dirs
  [ $(left) -lt 60 ] && { echo "skip $1: $(left) s left"; return; }
  cp /tmp/so_${1:0:1} $SO
  timeout $(( $(left) > 130 ? 130 : $(left) )) python3 .scratch/rows/rows_dt.py $1 $2 bfloat16 $3 $4 jaxnorm > $OUT/rows-$1.log 2>&1
  echo "$1 rc=$? at $(( $(date +%s) - T0 )) s"
}
ALL=16384,32768,65536,131072,262144
run E $ALL softmax,rms_norm,layer_norm fwd,fwd+bwd
run B $ALL softmax,rms_norm,layer_norm fwd,fwd+bwd
run F 131072,262144 softmax,rms_norm,layer_norm fwd,fwd+bwd
run G 131072,262144 rms_norm,layer_norm fwd
run E2 $ALL softmax,rms_norm,layer_norm fwd
run B2 $ALL softmax,rms_norm,layer_norm fwd
cp /tmp/so_E $SO
python3 .scratch/rows/ab_table.py
