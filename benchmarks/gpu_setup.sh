# Sourced by the family GPU scripts (gpu_padding.sh, gpu_decode.sh, gpu_sampling.sh): strict
# pipes, $OUT, the commit measured (COMMIT=<hash>: the device tree's .git may be stale), the GPU
# and its clocks, then the build of the CUDA handlers, timed. BUILD=0 skips the build: the jaxnorm
# that imports is measured (an earlier call's build of the same tree, on a warm machine).
# BUILD_INTO=DIR builds into DIR instead (pip --target, where a later call on the same warm
# machine finds it), copies its extension modules into the tree and puts the tree on PYTHONPATH.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
echo "${COMMIT:-$(git rev-parse HEAD 2>/dev/null)}" | tee "$OUT/commit.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
t0=$(date +%s)
if [ "${BUILD:-1}" = 0 ]; then
  python3 -c "import jaxnorm, jaxnorm._ffi as f; print('build skipped (BUILD=0):', jaxnorm.__file__, 'cuda', f.cuda_built())"
elif [ -n "${BUILD_INTO:-}" ]; then
  rm -rf "$BUILD_INTO"
  JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q --target "$BUILD_INTO" . > /tmp/build-into.log 2>&1 \
    || { tail -20 /tmp/build-into.log; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
  cp "$BUILD_INTO"/jaxnorm/_jaxnorm_*.so jaxnorm/
  export PYTHONPATH=$PWD
  python3 -c "import jaxnorm, jaxnorm._ffi as f; print(jaxnorm.__file__, 'cuda', f.cuda_built())" || exit 1
else
  JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q -e . 2>&1 | tail -3
  echo "build: $(( $(date +%s) - t0 )) s"
fi
