# Call 1 (one build of ab25bd4, TEMP switches): lead F (the 16-bit norms' 256x2 backward tiles with
# the fixed-flag op) and lead S (softmax forward rows in one CTA of the cluster tiles' shape).
OLD="JAXNORM_TEMP_NO_FIXED=1 JAXNORM_TEMP_NO_ALONE=1" TESTS="tests/test_norm.py tests/test_softmax.py" TEST_TIMEOUT=150 \
ROWS="1024,2048,4096,16384x1024 bfloat16,float16 layer_norm+bwd,rms_norm+bwd" \
ROWS2="8192,12288,16384,24576,32768,4096x16384 bfloat16 softmax,log_softmax" \
ROWS3="6144,8192,16384 float32,float16 softmax" \
COMMIT=ab25bd4 bash benchmarks/ab_norm_bwd.sh
