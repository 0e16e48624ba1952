#!/usr/bin/env bash
# One GPU call for the row ops in device time (issue 15): build; QuACK from the wheels in .whl/
# (git-ignored, carry .whl; see benchmarks/README.md); bench.py --timer device (jaxnorm, XLA,
# jaxnorm-me, and QuACK's JAX softmax when it imports); quack_torch.py --ops rows (QuACK's PyTorch
# RMSNorm, LayerNorm and softmax at the same shapes); then bench.py --render merges QuACK's
# PyTorch numbers into $OUT/bench.md. Runs without QuACK, saying so, when its wheels are missing.
#   COMMIT=<hash> names the commit measured (the device tree's .git may be stale).
#   OPS, DTYPES, WIDTHS: the selection, for both benchmarks (default all four ops, bfloat16,
#     1024..262144 at 2^27 elements per input); BENCH_ARGS, QUACK_ARGS: more arguments for each.
#   STAGES="bench quack" (default both); BENCH_TIMEOUT (default 300 s); LIMIT: the whole call's
#     seconds from the build's start (default 575); the QuACK stage gets what is left.
source "$(dirname "$0")/gpu_setup.sh"
LIMIT=${LIMIT:-575}
left() { echo $(( LIMIT - $(date +%s) + t0 )); }
OPS=${OPS:-layer_norm,rms_norm,softmax,log_softmax}
DTYPES=${DTYPES:-bfloat16}
WIDTHS=${WIDTHS:-1024,4096,16384,32768,65536,131072,262144}
STAGES=${STAGES:-"bench quack"}
stage() { [[ " $STAGES " == *" $1 "* ]]; }

# QuACK's wheels travel in .whl (git-ignored; benchmarks/quack_wheels.sh makes them). Its 92 MB
# cu13 libraries wheel is over a call's carry limit beside the tree, so its files travel as an xz
# tar (63.5 MB) in parts, cu13.txz.part00 (in .whl, with the small wheels and cu13.txz.nparts, the
# count) and the rest (in later calls' WHL_DIR: .whl2, .whl3), over consecutive calls on one warm
# machine. Each part and wheel seen is kept in /tmp, and the install, once all are there, in $SITE,
# so later calls skip all of this.
SITE=/tmp/site-quack
shopt -s nullglob
WHL=${WHL_DIR:-.whl}
mkdir -p /tmp/quack-whl
for part in $WHL/cu13.txz.part?? $WHL/cu13.txz.nparts; do [ -f "$part" ] && cp "$part" /tmp/; done
for w in $WHL/*.whl; do cp "$w" /tmp/quack-whl/; done
if [ -f $SITE/.complete ]; then
  echo "QuACK: installed by an earlier call on this machine ($SITE)"
else
  missing=()
  for w in quack_kernels nvidia_cutlass_dsl nvidia_cutlass_dsl_libs_base nvidia_cutlass_dsl_libs_core apache_tvm_ffi \
           torch_c_dlpack_ext jax_tvm_ffi einops; do
    found=(/tmp/quack-whl/$w-*.whl); [ ${#found[@]} -gt 0 ] || missing+=($w)
  done
  nparts=$(cat /tmp/cu13.txz.nparts 2>/dev/null || echo 2)
  for p in $(seq -f %02g 0 $((nparts - 1))); do [ -f /tmp/cu13.txz.part$p ] || missing+=(cu13.txz.part$p); done
  if [ ${#missing[@]} -eq 0 ]; then
    # One --target install for the wheels (a second would replace nvidia_cutlass_dsl/), then the
    # cu13 files unpacked into the same tree, as its wheel would have put them.
    rm -rf $SITE
    python3 -m pip install -q --no-index --no-deps --no-compile --target $SITE /tmp/quack-whl/*.whl 2>&1 | tail -3 &&
      cat $(seq -f /tmp/cu13.txz.part%02g 0 $((nparts - 1))) | tar xJf - -C $SITE && touch $SITE/.complete &&
      echo "QuACK: installed" || echo "QuACK: the install failed: the benchmark runs without it"
  else
    echo "QuACK: not installed, missing ${missing[*]}: the benchmark runs without it"
  fi
fi
[ -f $SITE/.complete ] && export PYTHONPATH=$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}

if stage bench; then
  timeout_s=$(( ${BENCH_TIMEOUT:-300} < $(left) - 20 ? ${BENCH_TIMEOUT:-300} : $(left) - 20 ))
  # --budget stops before a shape that would not finish; timeout is the backstop.
  XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.8} timeout $timeout_s \
    python3 benchmarks/bench.py --timer device --out "$OUT" --ops $OPS --dtypes $DTYPES --widths $WIDTHS \
    --small none --budget $(( timeout_s - 45 )) ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench-rows.log" | tail -20
  echo "bench.py rc=$? after $(( $(date +%s) - t0 )) s"
fi
if stage quack && [ -f $SITE/.complete ]; then
  timeout $(( $(left) - 20 )) python3 benchmarks/quack_torch.py --out "$OUT" --ops $OPS --dtypes $DTYPES \
    --widths $WIDTHS ${QUACK_ARGS:-} 2>&1 | tee "$OUT/quack-torch-rows.log" | tail -25
  echo "quack_torch.py rc=$? after $(( $(date +%s) - t0 )) s"
fi
if [ -f "$OUT/bench.json" ]; then
  python3 benchmarks/bench.py --render "$OUT/bench.json" --out "$OUT" \
    $([ -f "$OUT/quack_torch.json" ] && echo --quack-json "$OUT/quack_torch.json") 2>&1
fi
