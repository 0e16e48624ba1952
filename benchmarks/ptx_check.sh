#!/usr/bin/env bash
# Before a GPU call, on a machine with nvcc and no GPU: every CUDA unit the build compiles (the
# sources CMakeLists.txt lists and each typed unit for each type and flag), through nvcc's front end to PTX
# for sm_90, in parallel. Catches what a patch breaks in a unit it was not checked against (a
# template instantiated by another family), in ~2.5 minutes on two cores instead of a failed
# build on the GPU machine. Registers and spills need the full compile (ptxas -v), unit by unit.
#   bash benchmarks/ptx_check.sh [TREE]        (TREE: a source tree, default .)
# PYTHON: an interpreter with jax installed (for XLA FFI's headers), default python3.
# PTX_OUT: a folder to keep each unit's PTX in; two runs' folders diff to show whether a change
#   that should not alter code (a rename, a moved helper) left every kernel as it was. Run both at
#   the same path (the change stashed, then not): the same source compiled from another folder
#   gave linear_attention's PTX another schedule (nvcc 13.0).
set -u
TREE=$(cd "${1:-.}" && pwd)
INC=$(${PYTHON:-python3} -c "import jax.ffi as f; print(f.include_dir())") || exit 1
W=$(mktemp -d)
srcs=$(sed -n '/nanobind_add_module(_jaxnorm_cuda/,/)/p' "$TREE/CMakeLists.txt" | grep -o 'ffi_src/cuda/[^ )]*\.cu')
units=$(sed -n '/foreach(unit/s/.*foreach(unit \(.*\))/\1/p' "$TREE/CMakeLists.txt")
flagged=$(sed -n '/foreach(flagged_unit/s/.*foreach(flagged_unit \(.*\))/\1/p' "$TREE/CMakeLists.txt")
types=$(sed -n '/foreach(type/s/.*foreach(type \(.*\))/\1/p' "$TREE/CMakeLists.txt" | head -1)
flags=$(sed -n '/foreach(flag /s/.*foreach(flag \(.*\))/\1/p' "$TREE/CMakeLists.txt")
for s in $srcs; do echo "$TREE/$s"; done > "$W/list"
for u in $units; do for t in $types; do
  f="$W/$(echo "$u" | tr / _)_$t.cu"
  printf '#define JAXNORM_TYPED %s\n#include "cuda/%s_typed.cuh"\n' "$t" "$u" > "$f"; echo "$f"
done; done >> "$W/list"
for u in $flagged; do for t in $types; do for g in $flags; do
  f="$W/$(echo "$u" | tr / _)_${t}_$g.cu"
  printf '#define JAXNORM_TYPED %s\n#define JAXNORM_FLAG %s\n#include "cuda/%s_typed.cuh"\n' "$t" "$g" "$u" > "$f"; echo "$f"
done; done; done >> "$W/list"
xargs -P "$(nproc)" -I{} sh -c 'nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -I'"$INC"' -I'"$TREE"'/ffi_src \
  -ptx {} -o '"$W"'/$(basename {}).ptx > '"$W"'/$(basename {}).log 2>&1 || echo "FAILED {}"' < "$W/list"
n=$(wc -l < "$W/list"); e=$(cat "$W"/*.log | grep -c ' error')
echo "units: $n, errors: $e"; [ "$e" -eq 0 ] || grep -h ' error' "$W"/*.log | sort | uniq | head -20
[ -z "${PTX_OUT:-}" ] || { mkdir -p "$PTX_OUT" && cp "$W"/*.ptx "$PTX_OUT"/; }
rm -rf "$W"; [ "$e" -eq 0 ]
