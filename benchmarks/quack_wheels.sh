#!/usr/bin/env bash
# On the development machine (the package registry reachable): QuACK's wheels for gpu_rows.sh,
# into .whl (the small wheels, the first part of the cu13 libraries and their count) and .whl2,
# .whl3 (the other parts). The cu13 wheel (92 MB) is over a call's carry limit beside the tree
# (27.5 MiB on disk at 8da2339; the limit counts disk blocks), so its files go as an xz tar in
# three parts, carried by three consecutive calls (gpu_rows.sh says how).
#   bash benchmarks/quack_wheels.sh [DIR1 DIR2 DIR3]      (~4 min, most of it xz)
set -euo pipefail
D1=${1:-.whl} D2=${2:-.whl2} D3=${3:-.whl3}
N=3  # parts: part00 with the small wheels in D1, part01 in D2, part02 in D3
tmp=$(mktemp -d)
python3 -m pip download -q --no-deps --python-version 3.12 --platform manylinux_2_28_x86_64 --only-binary=:all: \
  -d "$tmp" quack-kernels==0.6.5 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 \
  nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 apache-tvm-ffi jax-tvm-ffi==0.1.3 \
  torch-c-dlpack-ext einops
mkdir -p "$tmp/cu13" "$D1" "$D2" "$D3"
(cd "$tmp/cu13" && python3 -m zipfile -e "$tmp"/nvidia_cutlass_dsl_libs_cu13-*.whl . && tar cf - . | xz -T0 -9e) > "$tmp/cu13.txz"
rm "$tmp"/nvidia_cutlass_dsl_libs_cu13-*.whl
split -n $N -d "$tmp/cu13.txz" "$tmp/cu13.txz.part"
echo $N > "$tmp/cu13.txz.nparts"
mv "$tmp"/*.whl "$tmp/cu13.txz.part00" "$tmp/cu13.txz.nparts" "$D1"/
mv "$tmp/cu13.txz.part01" "$D2"/
mv "$tmp/cu13.txz.part02" "$D3"/
rm -rf "$tmp"
du -sh "$D1" "$D2" "$D3"
