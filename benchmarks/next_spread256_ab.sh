#!/usr/bin/env bash
# TEMP (branch next/spread-256): same-call A/B of the spread of 4096-column bf16 rows (2048
# float32) to 256 threads of 2 packs, against main. Before the call:
#   rm -rf .scratch/base && mkdir -p .scratch/base && git archive main ffi_src | tar -x -C .scratch/base
# then run with carry [".scratch/base"]: COMMIT=<hash> bash benchmarks/next_spread256_ab.sh
SMALL_WIDTHS=${SMALL_WIDTHS:-1024,2048,4096} bash benchmarks/results/h100-norm-spread-f0bed29/small_ab.sh
