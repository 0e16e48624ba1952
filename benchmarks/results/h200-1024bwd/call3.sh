# Call 3 of h200-1024bwd (carry .whl, on call 2's warm machine): QuACK's first wheel parts kept in
# /tmp, then the whole suite on this tree with call 2's build of the same CUDA sources (/tmp/m0:
# only jaxnorm/_ops.py differs, and the tree's Python is what runs).
#   COMMIT=<hash> bash benchmarks/results/h200-1024bwd/call3.sh
mkdir -p /tmp/quack-whl; cp .whl/*.whl /tmp/quack-whl/; cp .whl/cu13.txz.part00 .whl/cu13.txz.nparts /tmp/
rm -rf /tmp/m1 && cp -r /tmp/m0 /tmp/m1
mkdir -p .whl2 && touch .whl2/cu13.txz.part01  # the suite script copies it; call 4 brings the real part
exec bash "$(dirname "$0")/../h200-f32-staged/call2.sh"
