#!/usr/bin/env bash
# TEMP A/B: the candidates' resolve in warp 0 alone (default) against block reductions
# (JAXNORM_SAMPLING_BLOCK_RESOLVE=1), same call, interleaved rounds; the family's tests first
# (default setting) and the quick benchmark last.
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
timeout 200 python3 -m pytest -q -n 14 -p no:benchmark tests/test_sampling.py tests/test_ffi_targets.py tests/test_export.py tests/test_decode_example.py > $OUT/pytest-sampling.log 2>&1; tail -n 1 $OUT/pytest-sampling.log
grep -E '^(FAILED|ERROR)' $OUT/pytest-*.log | head
mkdir -p /tmp/j; rm -f /tmp/j/*
run() { [ $SECONDS -gt ${LIMIT:-400} ] && { echo "skip $2"; return; }
  JAXNORM_SAMPLING_BLOCK_RESOLVE=$1 OUT=/tmp/j timeout 80 python3 benchmarks/ab_sampling.py $2 1,8,64,256 float32,bfloat16 "top_k=50;top_k=50,top_p=0.9;top_p=0.9" 128256 2>&1 | grep -v Warn >> $OUT/ab.log; }
run 1 blk1; run 0 warp1; run 1 blk2; run 0 warp2
python3 - <<'PY' | tee $OUT/ab-summary.txt
import json, glob, os
d = {os.path.basename(f)[3:-5]: json.load(open(f)) for f in glob.glob('/tmp/j/cl-*.json')}
keys = sorted(set(k for l in d for k in d[l]))
best = lambda p, k: min([d[l][k] for l in d if l.startswith(p) and k in d[l]] or [float('nan')])
for k in keys:
    a, b = best('blk', k), best('warp', k)
    print(f"{k:45s} block {a:8.1f}  one warp {b:8.1f} ({b / a:.3f})")
PY
grep -c "CHECK FAILED" $OUT/ab.log
[ $SECONDS -lt 480 ] && timeout 100 python3 benchmarks/bench_sampling.py --out "$OUT" --quick > "$OUT/bench-sampling.log" 2>&1; grep -E 'ceiling|checks|B=(1|64) .*float32' "$OUT/bench-sampling.log" | head -12
echo "total $SECONDS s"
