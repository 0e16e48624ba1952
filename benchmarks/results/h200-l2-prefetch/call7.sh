# Call 7 of h200-l2-prefetch (a fresh machine; one build, the device budget short): D4 (the plain
# 16-bit RMSNorm backward's 256x2 tiles in the default mode take the op with constant flags, 64
# registers, 4 CTAs an SM; partials cap 592 for 513-4096 columns) against M3 (the same tiles with
# runtime flags, 80 registers, 3 an SM: b38bad1's kernel) by a TEMP host switch choosing the kernel
# at launch (JAXNORM_TEMP_NO_D4=1: M3). RMSNorm tests, then two rounds a side.
#   COMMIT=<hash> bash benchmarks/results/h200-l2-prefetch/call7.sh
source benchmarks/gpu_setup.sh
L=$OUT; R=$PWD
XLA_PYTHON_CLIENT_MEM_FRACTION=0.05 XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 100 python3 -m pytest -q -n 16 \
  -p no:cacheprovider -p no:benchmark tests/test_norm.py -k "rms" > $L/pytest-rms.log 2>&1
echo "pytest rc=$?: $(tail -n 1 $L/pytest-rms.log)"; grep -E "^(FAILED|ERROR)" $L/pytest-rms.log | head
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.8
set1="1024,2048,4096,16384x1024,4096x1024 bfloat16,float16 rms_norm+bwd"
rows() { local lab=$1; shift; [ $SECONDS -gt 280 ] && { echo "skip $lab"; return; }
  env "$@" timeout 60 python3 $R/benchmarks/ab_rows.py $lab $set1 2>&1 | grep -v Warn >> $L/ab.log; }
rows d4r1 X=1; rows m3r1 JAXNORM_TEMP_NO_D4=1; rows m3r2 JAXNORM_TEMP_NO_D4=1; rows d4r2 X=1
python3 benchmarks/ab_rows.py --compare $L/ab.log m3 d4 | tee $L/ab-summary.txt
echo "total $SECONDS s"
