#!/usr/bin/env bash
# Third device call of session 20 (binaries of the evict_first commits; one block per SM for the branch GEMVs is the
# default): the decode weight streams read evict_first in L2, and prefill v13.
#   - GpuWeightEvictFirst.* (bitwise on / off, both model steps), then same-call A/Bs of
#     DEEPINFER_WEIGHT_L2_EVICT_FIRST "0 1" (V4, V4.1), the select's in-step stamps and the routing's with it on
#     (against run 115's: does the first run of each stretch of code still cost 2-3x?), and a traced batch-1 step;
#   - prefill v13 (helper-110: v9 with a lean item epilogue): its bitwise cases, then the prefill rows (v9, v13 and
#     cuBLASLt FP8 in the same run).
# No suites (the session's last call runs them). ~350 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session20_call3.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='evict_tests_tail|timeout 200 $b/test_gpu_model --gtest_filter=GpuWeightEvictFirst.* > $OUT/evict_tests.log 2>&1 || grep -B3 -A8 Failure $OUT/evict_tests.log | head -40 && grep -E "^\[ +(OK|FAILED|PASSED) " $OUT/evict_tests.log && grep -E "GPU_CHECK.*mismatches=[1-9]" $OUT/evict_tests.log | head;
ab_evict_first|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_WEIGHT_L2_EVICT_FIRST "0 1" 2;
ab_evict_first_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_WEIGHT_L2_EVICT_FIRST "0 1" 2 --family v41;
stamps_tail|for v in 0 1 ; do DEEPINFER_WEIGHT_L2_EVICT_FIRST=$v timeout 100 $b/v4_decode --quick --pdl on --select-stamps --out $OUT/sel_$v.json > $OUT/sel_$v.log 2>&1 ; DEEPINFER_WEIGHT_L2_EVICT_FIRST=$v timeout 100 $b/v4_decode --quick --pdl on --route-stamps --out $OUT/route_$v.json > $OUT/route_$v.log 2>&1 ; done ; grep -H "all layers" $OUT/sel_0.log $OUT/sel_1.log ; grep -H -E "layer +hash|^ +all " $OUT/route_0.log $OUT/route_1.log | head -12;
trace_tail|DEEPINFER_WEIGHT_L2_EVICT_FIRST=1 OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true && head -14 $OUT/trace/trace_b1.txt;
prefill_tests_tail|timeout 280 $b/test_gpu --gtest_filter=GpuMoePrefillGemm.* > $OUT/prefill_tests.log 2>&1 || grep -B3 -A8 Failure $OUT/prefill_tests.log | head -30 && grep -E "^\[ +(OK|FAILED|PASSED) " $OUT/prefill_tests.log && grep -c "v13.*mismatches=0" $OUT/prefill_tests.log && grep -E "v13.*mismatches=[1-9]" $OUT/prefill_tests.log | head;
prefill_tail|timeout 200 $b/roofline --prefill-only --prefill-16k --quick --out $OUT/prefill.json > $OUT/prefill.log 2>&1 || true && grep -E "^copy|^roofline|cublaslt|mxfp4_prefill_v9 |\(v9\)|v13" $OUT/prefill.log | head -24'
exec bash "$(dirname "$0")/../device_call.sh"
