#!/usr/bin/env bash
# jaxnorm's and QuACK's row ops under Nsight Compute, one method for both (clocks free, caches
# flushed before every kernel): one process a cell and library, CALLS calls each
# (profile_one.py, quack_once.py), then ncu_cells.py's table in $OUT/ncu-cells.md. Run it from the
# repository root on a machine where an earlier call built jaxnorm into the tree (gpu_setup.sh, or
# the .so copied in) and gpu_rows.sh installed QuACK into /tmp/site-quack.
#   CELLS="OP:DIRECTION:RxC:DTYPE ..." CALLS=3 UNTIL=540 bash benchmarks/ncu_cells.sh
# DETAIL=1 also profiles one call a cell and library with the stall, scheduler, occupancy and
# memory sections (where a kernel's time goes, not only how long it takes), as text in
# $D/<library>__<cell>.detail.txt.
# The default cells are where bench.py's table had jaxnorm behind QuACK at 12996e2 (H200), and two
# where it was ahead (the last two), as controls.
OUT=${OUT:-/tmp/out}; D=$OUT/ncu-cells; mkdir -p "$D"
CALLS=${CALLS:-3}
CELLS=${CELLS:-"rms_norm:fwd:4096x32768:bfloat16 rms_norm:fwd+bwd:131072x1024:bfloat16
  rms_norm:fwd:8192x16384:float32 rms_norm:fwd:2048x65536:float32 layer_norm:fwd:512x262144:float32
  softmax:fwd:8192x16384:bfloat16 softmax:fwd:2048x65536:float32 rms_norm:fwd:131072x1024:bfloat16
  rms_norm:fwd:1024x131072:bfloat16 softmax:fwd+bwd:2048x65536:bfloat16"}
SITE=/tmp/site-quack
NCU="ncu --clock-control none --cache-control all --print-units base --csv --metrics gpu__time_duration.sum"
NCU_DETAIL="ncu --clock-control none --cache-control all --section WarpStateStats --section SchedulerStats
  --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section SpeedOfLight"
python3 -c "import jaxnorm._ffi as f; assert f.cuda_built()" 2>/dev/null || { echo "ncu_cells: jaxnorm's CUDA build not in the tree"; exit 1; }
[ -f $SITE/.complete ] || echo "ncu_cells: no QuACK in $SITE (gpu_rows.sh installs it): jaxnorm only"
for c in $CELLS; do
  [ $SECONDS -gt ${UNTIL:-540} ] && { echo "skip $c (${SECONDS}s)"; continue; }
  IFS=: read -r op dir shape dtype <<< "$c"
  f="${op}__${dir/+/}__${shape}__${dtype}__${CALLS}"  # no "+": the device run does not send such names back
  PYTHONPATH=$PWD timeout 120 $NCU --log-file "$D/jaxnorm__$f.csv" \
    python3 benchmarks/profile_one.py "$op" "$dir" "$shape" "$dtype" jaxnorm "$CALLS" > "$D/jaxnorm__$f.out" 2>&1 ||
    echo "jaxnorm $c: rc=$? (see $D/jaxnorm__$f.out)"
  [ "${DETAIL:-0}" = 1 ] && PYTHONPATH=$PWD timeout 150 $NCU_DETAIL --log-file "$D/jaxnorm__$f.detail.txt" \
    python3 benchmarks/profile_one.py "$op" "$dir" "$shape" "$dtype" jaxnorm 1 > /dev/null 2>&1
  if [ -f $SITE/.complete ] && [ "$op" != log_softmax ]; then
    PYTHONPATH=$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages timeout 150 $NCU --log-file "$D/quack__$f.csv" \
      python3 benchmarks/quack_once.py "$op" "$dir" "$shape" "$dtype" "$CALLS" > "$D/quack__$f.out" 2>&1 ||
      echo "quack $c: rc=$? (see $D/quack__$f.out)"
    [ "${DETAIL:-0}" = 1 ] && PYTHONPATH=$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages timeout 150 $NCU_DETAIL \
      --log-file "$D/quack__$f.detail.txt" python3 benchmarks/quack_once.py "$op" "$dir" "$shape" "$dtype" 1 > /dev/null 2>&1
  fi
  echo "$c done (${SECONDS}s)"
done
python3 benchmarks/ncu_cells.py "$D" | tee "$OUT/ncu-cells.md"
