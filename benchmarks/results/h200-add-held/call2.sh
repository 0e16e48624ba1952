# Call 2 of h200-add-held: the taken commit (no switch) built into /tmp/m1, the whole suite
# (benchmarks/gpu_suite.sh).
#   COMMIT=<hash> bash benchmarks/results/h200-add-held/call2.sh
bash "$(dirname "$0")/../../gpu_suite.sh"
