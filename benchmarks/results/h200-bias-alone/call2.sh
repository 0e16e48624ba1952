# Call 2 of h200-bias-alone (carry .whl2, on call 1's warm machine): the second cu13 part to /tmp,
# then the whole suite on call 1's build of this tree: its extension modules copied from /tmp/m1
# into the tree (where call 3's BUILD=0 bench finds them too), -v so a cut-off run names its
# failures. From the repository root: COMMIT=<hash> bash benchmarks/results/h200-bias-alone/call2.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
echo "commit $COMMIT" | tee "$OUT/commit.txt"
cp .whl2/cu13.txz.part01 /tmp/; ls /tmp/cu13*
cp /tmp/m1/jaxnorm/_jaxnorm_*.so jaxnorm/
python3 -c "import jaxnorm, jaxnorm._ffi as f; print(jaxnorm.__file__, 'cuda', f.cuda_built())" || exit 1
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
t0=$SECONDS; timeout 560 python3 -m pytest -v -n 16 -p no:cacheprovider -p no:benchmark tests \
  > $OUT/pytest.log 2>&1
echo "pytest rc=$?: $(tail -n 1 $OUT/pytest.log)"
echo "passed $(grep -c ' PASSED ' $OUT/pytest.log), skipped $(grep -c ' SKIPPED ' $OUT/pytest.log)"
grep -E " (FAILED|ERROR) |^(FAILED|ERROR)" $OUT/pytest.log | head -20; echo "suite $((SECONDS - t0)) s"
gzip $OUT/pytest.log
