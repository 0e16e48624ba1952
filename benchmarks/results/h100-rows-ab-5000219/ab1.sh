# v11 A/B: B = this tree (split cluster barrier, no exit barrier, persistent cluster grids);
# C = -DJAXNORM_ONE_SHOT_CLUSTERS=1; D = C + -DJAXNORM_FWD_CLUSTER_256=1. Builds C, D by CMake.
set -o pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p $OUT; T0=$(date +%s)
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
for v in C D; do
  flag=$([ $v = C ] && echo "-DJAXNORM_ONE_SHOT_CLUSTERS=1" || echo "-DJAXNORM_ONE_SHOT_CLUSTERS=1 -DJAXNORM_FWD_CLUSTER_256=1")
  rm -rf /tmp/tree$v /tmp/build$v; mkdir -p /tmp/tree$v; cp -r CMakeLists.txt ffi_src /tmp/tree$v/
  (cmake -S /tmp/tree$v -B /tmp/build$v -DSKBUILD_PROJECT_NAME=jaxnorm -DJAXNORM_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
     "-DCMAKE_CUDA_FLAGS=$flag" -DPython_EXECUTABLE=$(which python3) > /tmp/cmake$v.log 2>&1 &&
   cmake --build /tmp/build$v --target _jaxnorm_cuda -j 6 >> /tmp/cmake$v.log 2>&1
   echo "$v build rc=$? at $(( $(date +%s) - T0 )) s") &
done
COMMIT=${COMMIT} source benchmarks/gpu_setup.sh
wait
SO=$(python3 -c "import jaxnorm._jaxnorm_cuda as m; print(m.__file__)")
cp $SO /tmp/so_B; cp /tmp/buildC/_jaxnorm_cuda*.so /tmp/so_C; cp /tmp/buildD/_jaxnorm_cuda*.so /tmp/so_D || { tail -20 /tmp/cmakeC.log /tmp/cmakeD.log; exit 1; }
echo "$SO" > /tmp/so_path
export XLA_PYTHON_CLIENT_PREALLOCATE=false
for v in ${VARIANTS:-B C D B2 C2 D2}; do
  [ $(left) -lt 80 ] && { echo "skip $v: $(left) s left"; continue; }
  cp /tmp/so_${v:0:1} $SO
  timeout $(( $(left) > 120 ? 120 : $(left) )) python3 .scratch/rows/rows_dt.py $v ${W:-16384,32768,65536,262144} bfloat16 ${OPS:-softmax,rms_norm,layer_norm} ${DIRS:-fwd} jaxnorm \
    > $OUT/rows-$v.log 2>&1; echo "$v rc=$? at $(( $(date +%s) - T0 )) s"
done
cp /tmp/so_B $SO
python3 .scratch/rows/ab_table.py
