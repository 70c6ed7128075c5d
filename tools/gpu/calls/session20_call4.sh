#!/usr/bin/env bash
# Fourth device call of session 20 (binaries of the evict_first modes: 0 | dense | 1, only where a launch reads each
# weight byte once): which weight streams should read evict_first.
#   - GpuWeightEvictFirst.* (bitwise, every kind on against off);
#   - same-call A/Bs of DEEPINFER_WEIGHT_L2_EVICT_FIRST "0 dense 1" (V4, V4.1; batch 1-256 and prefill);
#   - the select's and the routing's in-step stamps per mode (tools/gpu/stamps_ab.sh);
#   - a traced batch-1 V4 step with the dense mode;
#   - prefill v14 (helper-112): its bitwise cases, then the prefill rows (v9, v13, v14, cuBLASLt FP8 in one run).
# No suites. ~300 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session20_call4.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='evict_tests_tail|timeout 200 $b/test_gpu_model --gtest_filter=GpuWeightEvictFirst.* > $OUT/evict_tests.log 2>&1 || grep -B3 -A8 Failure $OUT/evict_tests.log | head -40 && grep -E "^\[ +(OK|FAILED|PASSED) " $OUT/evict_tests.log && grep -E "GPU_CHECK.*mismatches=[1-9]" $OUT/evict_tests.log | head;
ab_evict_first|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_WEIGHT_L2_EVICT_FIRST "0 dense 1" 2;
ab_evict_first_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_WEIGHT_L2_EVICT_FIRST "0 dense 1" 2 --family v41;
stamps_tail|OUT=$OUT bash tools/gpu/stamps_ab.sh $b DEEPINFER_WEIGHT_L2_EVICT_FIRST "0 dense 1";
trace_tail|DEEPINFER_WEIGHT_L2_EVICT_FIRST=dense OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true && head -14 $OUT/trace/trace_b1.txt;
prefill_tests_tail|timeout 280 $b/test_gpu --gtest_filter=GpuMoePrefillGemm.* > $OUT/prefill_tests.log 2>&1 || grep -B3 -A8 Failure $OUT/prefill_tests.log | head -30 && grep -E "^\[ +(OK|FAILED|PASSED) " $OUT/prefill_tests.log && grep -c "v14.*mismatches=0" $OUT/prefill_tests.log && grep -E "v1[34].*mismatches=[1-9]" $OUT/prefill_tests.log | head;
prefill_tail|timeout 200 $b/roofline --prefill-only --prefill-16k --quick --out $OUT/prefill.json > $OUT/prefill.log 2>&1 || true && grep -E "^roofline|of the dense" $OUT/prefill.log | head -40'
exec bash "$(dirname "$0")/../device_call.sh"
