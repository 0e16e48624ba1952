# Prepared at a3eaa82, run 2026-11-28 at 46e1b67 (call/, README.md). Same-call A/B on the GPU machine: this tree
# (main) against this tree with bwd-256x2.patch applied (16-bit norm backward rows of 32768-131072
# columns on clusters of 256-thread CTAs of 4 packs, two CTAs an SM). Run from the repository root:
#   COMMIT=<hash> bash benchmarks/results/h200-bwd-256x2/ab.sh
# ptxas (nvcc 13.0, sm_90): the new tiles take 97-118 registers, no spills (<= 128: two CTAs an SM
# fit), and 64 KB of column partials a CTA. tests/tile_choice_check.cc passes with the patch.
# Prediction: bf16/fp16 norm fwd+bwd 0.85-0.95x the time at 32768-131072 (two rows' chains overlap
# on an SM; H200 call 3 measured the backward alone at ~67% of the copy at 65536), 262144 and
# float32 unchanged (their tiles do not change).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a $OUT/log.txt) 2>&1
echo "commit $COMMIT"
here=$PWD
rm -rf /tmp/new && cp -r . /tmp/new && rm -rf /tmp/new/build && (cd /tmp/new && git apply benchmarks/results/h200-bwd-256x2/bwd-256x2.patch) || exit 1
source benchmarks/gpu_setup.sh   # builds and installs this tree (base)
# The sampling test left unrun at a3eaa82 (96-token rows on mass_rows without clusters), on base.
t0=$SECONDS; timeout 120 python3 -m pytest -q -n 16 -p no:benchmark tests/test_sampling.py -k "by_mass or mass_rows" > $OUT/pytest-sampling.log 2>&1
tail -n 1 $OUT/pytest-sampling.log; grep -E "^(FAILED|ERROR)" $OUT/pytest-sampling.log | head -10; echo "tests (sampling, base) $((SECONDS - t0)) s"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
inst() { local t0=$SECONDS; (cd "$1" && JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q -e . > "$OUT/inst-$2.log" 2>&1) || { tail -5 "$OUT/inst-$2.log"; exit 1; }; echo "install $2: $((SECONDS - t0)) s"; }
inst /tmp/new new
t0=$SECONDS; (cd /tmp/new && timeout 200 python3 -m pytest -q -n 16 -p no:benchmark tests/test_norm.py tests/test_add_norm.py tests/test_host_programs.py > $OUT/pytest.log 2>&1)
tail -n 1 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -10; echo "tests (new) $((SECONDS - t0)) s"
timing() {
  local t0=$SECONDS
  export XLA_PYTHON_CLIENT_MEM_FRACTION=0.5
  timeout 70 python3 benchmarks/ab_rows.py $1 32768,65536,131072,262144,16x65536,64x131072 bfloat16 rms_norm+bwd,layer_norm+bwd 2>&1 | grep "^\[" >> $OUT/ab.log
  timeout 40 python3 benchmarks/ab_rows.py $1 65536 float16 rms_norm+bwd 2>&1 | grep "^\[" >> $OUT/ab.log
  export XLA_PYTHON_CLIENT_MEM_FRACTION=0.1
  echo "timing $1: $((SECONDS - t0)) s"
}
for r in 1 2 3; do for t in base new; do
  [ $SECONDS -gt 500 ] && break 2
  inst $([ $t = base ] && echo "$here" || echo /tmp/new) $t; timing $t$r
done; done
python3 benchmarks/ab_rows.py --compare $OUT/ab.log base new | tee $OUT/ab-rows.txt
echo "total $SECONDS s"
