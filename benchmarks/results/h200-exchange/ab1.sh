# Same-call A/B on the H200: main (.scratch/base) against this tree, whose cluster exchanges push by
# st.async (the norm backward's cluster tiles; the register-held sampler mass_rows).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a $OUT/log.txt) 2>&1
echo "commit $COMMIT"
here=$PWD
rm -rf /tmp/base && cp -r . /tmp/base && rm -rf /tmp/base/build && cp -r .scratch/base/. /tmp/base/
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
wheel() { local t0=$SECONDS; (cd "$1" && JAXNORM_CUDA=ON python3 -m pip wheel --no-build-isolation --no-deps -q -w /tmp/whl-$2 . > "$OUT/build-$2.log" 2>&1); echo "wheel $2: rc=$? $((SECONDS - t0)) s"; }
wheel /tmp/base base & p1=$!
t0=$SECONDS; timeout 200 python3 -m pytest -q -n 8 -p no:benchmark tests/test_norm.py tests/test_add_norm.py tests/test_sampling.py > $OUT/pytest.log 2>&1
tail -n 1 $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -10; echo "tests (new) $((SECONDS - t0)) s"
wait $p1
inst() { local t0=$SECONDS; (cd "$1" && JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q -e . > "$OUT/inst-$2.log" 2>&1) || { tail -5 "$OUT/inst-$2.log"; exit 1; }; echo "install $2: $((SECONDS - t0)) s"; }
mkdir -p /tmp/ab
timing() {
  local t0=$SECONDS
  export XLA_PYTHON_CLIENT_MEM_FRACTION=0.5
  timeout 70 python3 benchmarks/ab_rows.py $1 32768,65536,131072,262144,16x65536 bfloat16 rms_norm+bwd,layer_norm+bwd 2>&1 | grep "^\[" >> $OUT/ab.log
  timeout 40 python3 benchmarks/ab_rows.py $1 65536,262144 float32 rms_norm+bwd,layer_norm+bwd 2>&1 | grep "^\[" >> $OUT/ab.log
  export XLA_PYTHON_CLIENT_MEM_FRACTION=0.1
  OUT=/tmp/ab timeout 60 python3 benchmarks/ab_sampling.py $1 1,8,64 float32,bfloat16 "no filter;min_p=0.1" 32000,128256 2>&1 | grep -v Warn >> $OUT/ab-sampling.log
  echo "timing $1: $((SECONDS - t0)) s"
}
for r in 1 2 3; do for t in base new; do
  [ $SECONDS -gt 500 ] && break 2
  inst $([ $t = base ] && echo /tmp/base || echo "$here") $t; timing $t$r
done; done
inst "$here" new > /dev/null
python3 benchmarks/ab_rows.py --compare $OUT/ab.log base new | tee $OUT/ab-rows.txt
python3 benchmarks/ab_sampling.py --compare /tmp/ab base new | tee $OUT/ab-sampling.txt
grep -c "CHECK FAILED" $OUT/ab-sampling.log
echo "total $SECONDS s"
