# Prepared, not run: FlashInfer 0.6.13's anchor on the H200 (never measured there), from a binary
# built on the development machine, so the call spends no device time on its ~2.5-minute build.
# Built here on 2026-11-29 (nvcc 13.0, headers from flashinfer-python==0.6.13's
# flashinfer/data/include, curand from the nvidia-curand wheel's nvidia/cu13):
#   pip download --no-deps flashinfer-python==0.6.13 nvidia-curand -d /tmp/fi   (unzip both)
#   nvcc -O3 -std=c++17 -arch=sm_90a -I<fi>/flashinfer/data/include -I<curand>/nvidia/cu13/include \
#     benchmarks/anchors/flashinfer_sampling.cu -o .scratch/fis -L<curand>/nvidia/cu13/lib -lcurand
# (ln -s libcurand.so.10 libcurand.so there first). Then, carrying .scratch/fis:
#   bash benchmarks/results/next-batch1-chain/flashinfer.sh
# The device's Python environment holds libcurand.so.10 (nvidia-curand); if the binary does not
# run there (other system libraries), build it there as benchmarks/gpu_sampling.sh does.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
L=$(dirname "$(find /opt /usr -name 'libcurand.so.10' 2>/dev/null | head -1)"); echo "curand: $L"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
LD_LIBRARY_PATH=$L timeout 60 .scratch/fis > $OUT/flashinfer-events.log 2>&1; echo "fis rc=$? $SECONDS s"
FIS_REPS=2 LD_LIBRARY_PATH=$L timeout 240 ncu --csv --metrics gpu__time_duration.sum --cache-control all \
  --clock-control none --log-file $OUT/flashinfer-ncu.csv .scratch/fis > $OUT/flashinfer-ncu.out 2> $OUT/flashinfer-ncu.err
echo "ncu rc=$? $SECONDS s"; tail -2 $OUT/flashinfer-ncu.err
python3 benchmarks/flashinfer_ncu.py $OUT/flashinfer-ncu.out $OUT/flashinfer-ncu.csv | tee $OUT/flashinfer-ncu.md
