# Call 2 of h200-narrow-held (carry .whl): QuACK's small wheels and first cu13 part kept in /tmp for
# calls 3-4; this tree built into /tmp/m1; the one-CTA RMSNorm backward's three ways at 8193-16384
# 16-bit columns, one build, a launch switch (JAXNORM_TEMP_HELD1 unset: held scale and staged rows;
# plain: the plain tile; unstaged: the scale held, rows not staged), two rounds; then the whole suite.
#   COMMIT=<hash> bash benchmarks/results/h200-narrow-held/call2.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/quack-whl; cp .whl/*.whl /tmp/quack-whl/; cp .whl/cu13.txz.part00 .whl/cu13.txz.nparts /tmp/
rm -rf /tmp/m1; t0=$(date +%s)
JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q --target /tmp/m1 . > /tmp/build-m1.log 2>&1 \
  || { tail -20 /tmp/build-m1.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
cp /tmp/m1/jaxnorm/_jaxnorm_*.so jaxnorm/
SET="9000,10240,12288,14336,16384 bfloat16,float16 rms_norm+bwd"
for i in 1 2; do
  OUT=/tmp/ab timeout 60 python3 benchmarks/ab_rows.py staged$i $SET 2>&1 | grep -v Warn >> $OUT/ab.log
  JAXNORM_TEMP_HELD1=plain OUT=/tmp/ab timeout 60 python3 benchmarks/ab_rows.py plain$i $SET 2>&1 | grep -v Warn >> $OUT/ab.log
  JAXNORM_TEMP_HELD1=unstaged OUT=/tmp/ab timeout 60 python3 benchmarks/ab_rows.py unstaged$i $SET 2>&1 | grep -v Warn >> $OUT/ab.log
done
python3 benchmarks/ab_rows.py --compare $OUT/ab.log plain staged unstaged | tee $OUT/ab-summary.txt
mkdir -p .whl2 && touch .whl2/cu13.txz.part01  # the suite script copies it; call 3 brings the real part
exec bash "$(dirname "$0")/../h200-f32-staged/call2.sh"
