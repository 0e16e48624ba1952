# Call 3 of h200-ln-staged: the taken commit (the residual-add LayerNorm backward's fixed-flag op,
# no switches) built, the whole suite, then one round of the residual-add A/B set on this build
# (the steps written inline when it ran are now benchmarks/gpu_suite.sh's).
#   COMMIT=<hash> bash benchmarks/results/h200-ln-staged/call3.sh
SET=addnorm_fixed bash "$(dirname "$0")/../../gpu_suite.sh"
