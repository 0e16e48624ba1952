# One GPU call, two builds: main's tree (abtree/, `git archive BASE ffi_src jaxnorm CMakeLists.txt
# pyproject.toml README.md`) and this tree, each installed (not editable) into its own directory
# and imported by PYTHONPATH from outside the repository. A runtime switch would put both
# backwards' code in every kernel (the TEMP branch measured that way: its bf16 16384-column tile
# grew from 1808 to 2296 instructions and lost 7%), so each side here is its own build.
#   1. The norm tests on this tree's build.
#   2. ab_norm_bwd.py's `lean` set (17 cases, every tile kind), two rounds a side.
#   3. Nsight Compute of the bf16 RMSNorm backward at 8192 x 16384 on both builds.
# Run from the repository root: COMMIT=<hash> BASE=<hash> bash benchmarks/results/h200-lean-bwd/lean-ab.sh
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=$PWD
echo "new $COMMIT, old $BASE" | tee "$OUT/commit.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
t0=$(date +%s)
(JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q --target /tmp/m0 ./abtree > $OUT/build-m0.log 2>&1
 echo "m0 build rc=$? $(( $(date +%s) - t0 )) s") &
JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q --target /tmp/m1 . > $OUT/build-m1.log 2>&1
echo "m1 build rc=$? $(( $(date +%s) - t0 )) s"
wait
cd /tmp
for m in m0 m1; do
  PYTHONPATH=/tmp/$m python3 -c "import jaxnorm, jaxnorm._ffi as f; print('$m', jaxnorm.__file__, 'cuda', f.cuda_built())" 2>&1 | tail -1
done
PYTHONPATH=/tmp/m1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 150 \
  python3 -m pytest -q -n 16 -p no:cacheprovider -p no:benchmark $R/tests/test_norm.py $R/tests/test_add_norm.py \
  $R/tests/test_transforms.py $R/tests/test_forward_mode.py > $OUT/pytest-m1.log 2>&1
tail -n 1 $OUT/pytest-m1.log; grep -E "^(FAILED|ERROR)" $OUT/pytest-m1.log | head -20
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
run() { [ $SECONDS -gt 500 ] && { echo "skip $1$2"; return; }
  PYTHONPATH=/tmp/$1 timeout 100 python3 $R/benchmarks/ab_norm_bwd.py $1$2 /tmp/ab lean 2>&1 | grep -v Warn | tail -n 17 >> $OUT/ab.log; }
for i in 1 2; do run m0 r$i; run m1 r$i; done
grep "NOT REPRODUCIBLE" $OUT/ab.log
python3 $R/benchmarks/ab_norm_bwd.py --compare /tmp/ab m0 m1 | tee $OUT/ab-summary.txt
cp /tmp/ab/*.json $OUT/ 2>/dev/null
for m in m0 m1; do
  [ $SECONDS -gt 530 ] && { echo "skip ncu $m"; continue; }
  PYTHONPATH=/tmp/$m timeout 60 ncu -k regex:tile_bwd --launch-count 1 --section SpeedOfLight --section WarpStateStats \
    --section SchedulerStats --section InstructionStats --section LaunchStats \
    python3 $R/benchmarks/profile_one.py rms_norm fwd+bwd 8192x16384 bfloat16 > $OUT/ncu-$m-16384.txt 2>&1
  grep -E "Duration|Executed Instructions  |Issued Warp|Eligible|No Eligible|Registers Per|Stall" $OUT/ncu-$m-16384.txt | head -14
done
echo "total $SECONDS s"
