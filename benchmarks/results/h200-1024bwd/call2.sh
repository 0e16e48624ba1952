# Call 2 of h200-1024bwd: the partials cap alone (jaxnorm/_ops.py's _MAX_PARTIALS 512 -> 1184,
# Python only): call 1's base build /tmp/m0, or on a fresh machine this tree (05cbbcd's sources)
# built there, copied to /tmp/m2 with the one line changed, then two rounds a side against /tmp/m0
# at the backward widths it reaches. Carrying .whl it also keeps QuACK's first wheel parts in /tmp.
[ -d .whl ] && { mkdir -p /tmp/quack-whl; cp .whl/*.whl /tmp/quack-whl/; cp .whl/cu13.txz.part00 .whl/cu13.txz.nparts /tmp/; }
[ -d /tmp/m0 ] || { t0=$(date +%s); JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q --target /tmp/m0 . \
  > /tmp/build-m0.log 2>&1 || { tail -20 /tmp/build-m0.log; exit 1; }; echo "build $(( $(date +%s) - t0 )) s"; }
OUT=${OUT:-/tmp/out}; L=/tmp/ablogs2; rm -rf $L /tmp/m2; mkdir -p $L $OUT; R=$PWD
cp -r /tmp/m0 /tmp/m2 && sed -i 's/^_MAX_PARTIALS = 512$/_MAX_PARTIALS = 1184/' /tmp/m2/jaxnorm/_ops.py
grep -n "^_MAX_PARTIALS" /tmp/m0/jaxnorm/_ops.py /tmp/m2/jaxnorm/_ops.py
cd /tmp; export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 PYTHONUNBUFFERED=1
rows() { [ $SECONDS -gt 500 ] && { echo "skip $1$2"; return; }
  PYTHONPATH=/tmp/$1 OUT=$L timeout 100 python3 $R/benchmarks/ab_rows.py $1$2 $3 2>&1 | grep -v Warn >> $L/ab.log; }
k=0
for set in "128,256,512,768,2048,4096,128x128 bfloat16 rms_norm+bwd,layer_norm+bwd" "128,256,512,1024,64x128 float32 rms_norm+bwd,layer_norm+bwd"; do
  k=$((k + 1)); rows m0 s${k}r1 "$set"; rows m2 s${k}r1 "$set"; rows m2 s${k}r2 "$set"; rows m0 s${k}r2 "$set"
done
python3 $R/benchmarks/ab_rows.py --compare $L/ab.log m0 m2 | tee $OUT/ab-summary.txt
tar -czf $OUT/logs.tgz -C $L .
