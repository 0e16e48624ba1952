# Call 2 of h200-wide16 (carry .whl, on call 1's warm machine): QuACK's small wheels and first cu13
# part kept in /tmp for calls 3-4, this tree built into /tmp/m1, then the whole suite on it as
# ../h200-f32-staged/call2.sh runs it.
#   COMMIT=<hash> bash benchmarks/results/h200-wide16/call2.sh
mkdir -p /tmp/quack-whl; cp .whl/*.whl /tmp/quack-whl/; cp .whl/cu13.txz.part00 .whl/cu13.txz.nparts /tmp/
rm -rf /tmp/m1; t0=$(date +%s)
JAXNORM_CUDA=ON python3 -m pip install --no-build-isolation --no-deps -q --target /tmp/m1 . > /tmp/build-m1.log 2>&1 \
  || { tail -20 /tmp/build-m1.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
mkdir -p .whl2 && touch .whl2/cu13.txz.part01  # the suite script copies it; call 3 brings the real part
exec bash "$(dirname "$0")/../h200-f32-staged/call2.sh"
