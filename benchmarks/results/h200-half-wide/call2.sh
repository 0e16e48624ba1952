# Call 2 of h200-half-wide: two builds (m0: 00da942, B9 bounded as call 1 measured, in abtree/;
# m1: this tree, with the residual-add forward's 128 x 4 tiles at eight CTAs an SM), the norm and
# residual-add tests on m1, the residual-add forwards and one fwd+bwd set m0 m1 m1 m0
# (ab_two_builds.sh); then on m1 the bounded B9 by its TEMP switch at the row counts call 1 did
# not time (264-4096 rows of 9000) and 9000-12288, two rounds a side.
#   COMMIT=<hash> bash benchmarks/results/h200-half-wide/call2.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee -a $OUT/log.txt) 2>&1
R=$PWD
BASE=00da942 TEST_TIMEOUT=130 AB_UNTIL=400 \
  TESTS="$R/tests/test_add_norm.py $R/tests/test_norm.py::test_many_rows_wide_tiles $R/tests/test_norm.py::test_partial_warp_rows $R/tests/test_norm.py::test_memory_efficient_wide_rows" \
  ROWS="256,1024,3000,4096,2048 bfloat16,float16 add_rms_norm,add_layer_norm" \
  ROWS2="1024,1024x1024,8x1024 bfloat16 add_rms_norm+bwd,add_layer_norm+bwd,add_layer_norm,rms_norm" \
  bash benchmarks/ab_two_builds.sh
cd /tmp; mkdir -p /tmp/ab9; export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
for i in 1 2; do for m in new old; do
  [ $SECONDS -gt 540 ] && { echo "skip b9 $m$i"; continue; }
  if [ $m = old ]; then e=JAXNORM_TEMP_NO_HALFWIDE=1; else e=X=1; fi
  env $e PYTHONPATH=/tmp/m1 OUT=/tmp/ab9 timeout 60 python3 $R/benchmarks/ab_rows.py b9$m$i \
    "264x9000,1056x9000,4096x9000,9000,10240,12288" bfloat16 rms_norm+bwd 2>&1 | grep -v Warn >> $OUT/ab-b9.log
done; done
python3 $R/benchmarks/ab_rows.py --compare $OUT/ab-b9.log b9old b9new | tee $OUT/ab-b9-summary.txt
echo "total $SECONDS s"
