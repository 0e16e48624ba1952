# Call 2 of h200-bias-alone (carry .whl2, on call 1's or 3's warm machine): the whole suite on that
# call's /tmp/m1 build, as ../h200-f32-staged/call2.sh runs it (ran as that script's copy at 83cb580).
#   COMMIT=<hash> bash benchmarks/results/h200-bias-alone/call2.sh
exec bash "$(dirname "$0")/../h200-f32-staged/call2.sh"
