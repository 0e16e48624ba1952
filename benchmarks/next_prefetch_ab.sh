#!/usr/bin/env bash
# TEMP (branch next/one-read-prefetch): one GPU call: build, the one-read bit-for-bit test with the
# prefetch on, then the same-call A/B of JAXNORM_SAMPLING_PREFETCH=0/1/2 (two rounds each).
source benchmarks/gpu_setup.sh
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false
JAXNORM_SAMPLING_PREFETCH=2 JAXNORM_TEST_WIDE=1 timeout 120 python3 -m pytest -q -n 14 -p no:benchmark tests/test_sampling.py -k one_read > $OUT/pytest-oneread-pf2.log 2>&1; tail -n 1 $OUT/pytest-oneread-pf2.log
mkdir -p /tmp/j; rm -f /tmp/j/*
run() { local pf=$1 lab=$2; [ $SECONDS -gt ${LIMIT:-520} ] && { echo "skip $lab"; return; }
  JAXNORM_SAMPLING_PREFETCH=$pf OUT=/tmp/j timeout 70 python3 benchmarks/ab_sampling.py $lab 1,8,64,256 float32,bfloat16 "top_k=50;top_k=50,top_p=0.9" 128256 2>&1 | grep -v Warn >> $OUT/ab.log
  JAXNORM_SAMPLING_PREFETCH=$pf OUT=/tmp/j timeout 40 python3 benchmarks/ab_sampling.py ${lab}v 64,256 float32,bfloat16 "top_k=50" 32000 2>&1 | grep -v Warn >> $OUT/ab.log; }
run 0 pa0; run 1 pb0; run 2 pc0; run 0 pa1; run 1 pb1; run 2 pc1
python3 - <<'PY' | tee $OUT/ab-summary.txt
import json, glob, os
d = {os.path.basename(f)[3:-5]: json.load(open(f)) for f in glob.glob('/tmp/j/cl-*.json')}
keys = sorted(set(k for l in d for k in d[l]))
best = lambda p, k: min([d[l][k] for l in d if l.startswith(p) and k in d[l]] or [float('nan')])
for k in keys:
    a, b, c = best('pa', k), best('pb', k), best('pc', k)
    print(f"{k:45s} off {a:8.1f}  ahead {b:8.1f} ({b / a:.3f})  chunk {c:8.1f} ({c / a:.3f})")
PY
echo "total $SECONDS s"
