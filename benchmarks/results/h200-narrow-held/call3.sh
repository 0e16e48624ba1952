# Call 3 of h200-narrow-held (carry .whl2, on call 2's warm machine), as run: QuACK's second cu13
# part to /tmp; then the one-CTA RMSNorm backward's A/B that call 2 lost (its runs found no
# jaxnorm: no PYTHONPATH) on call 2's build in /tmp/m1. Mind the label "staged": it set
# JAXNORM_TEMP_HELD1 to the empty string, which the switch reads as set, so it ran the plain tile
# (its column equals "plain" within 0.6%); the staged side was measured in call 1 (965040a's H1).
cp .whl2/cu13.txz.part01 /tmp/; mkdir -p /tmp/ab; export PYTHONPATH=/tmp/m1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
SET="9000,10240,12288,14336,16384 bfloat16,float16 rms_norm+bwd"
for i in 1 2; do for m in staged plain unstaged; do
  JAXNORM_TEMP_HELD1=$([ $m = staged ] || echo $m) OUT=/tmp/ab timeout 60 python3 benchmarks/ab_rows.py $m$i $SET 2>&1 | grep -v Warn >> $OUT/ab.log
done; done
python3 benchmarks/ab_rows.py --compare $OUT/ab.log plain staged unstaged | tee $OUT/ab-summary.txt
