# Call 3 of h200-half-wide: the taken commit (B9 bounded, the residual-add forward at eight CTAs,
# no switches) built, the whole suite, then one round of the residual-add A/B set (addnorm) on
# this build (the steps written inline when it ran are now benchmarks/gpu_suite.sh's).
#   COMMIT=<hash> bash benchmarks/results/h200-half-wide/call3.sh
SET=addnorm bash "$(dirname "$0")/../../gpu_suite.sh"
