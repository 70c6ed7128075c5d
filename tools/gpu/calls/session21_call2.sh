#!/usr/bin/env bash
# Second device call of session 21 (binaries with the follow prefetch, cuda/l2_policy.h FollowPrefetch, default off):
#   - GpuL2FollowPrefetch.* (bitwise, both pairs on against off, V4 and V4.1 steps);
#   - same-call A/Bs of DEEPINFER_L2_FOLLOW_PREFETCH "0 experts dense 1" (V4 three alternations, V4.1 two);
#   - the select's and the routing's in-step stamps with it off and on (do the prefetched lines slow the latency
#     kernels, as the prefetch branch's did in run 120?);
#   - one traced batch-1 V4 step with it on (w2 and wo_b per launch against run 120's trace);
#   - ncu stall samples of the batch-1 MXFP4 wgmma stream alone (the first fp4_wgmma_kernel launch of `roofline
#     --gemm-only --quick`: V4 w1|w3 at one row), to see where its 41.6 % of copy speed goes (run 61's reading predates
#     the staging fix).
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session21_call2.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='follow_tests_tail|timeout 250 $b/test_gpu_model --gtest_filter=GpuL2FollowPrefetch.* > $OUT/follow_tests.log 2>&1 || grep -B3 -A8 Failure $OUT/follow_tests.log | head -40 && grep -E "^\[ +(OK|FAILED|PASSED) " $OUT/follow_tests.log && grep -E "GPU_CHECK.*mismatches=[1-9]" $OUT/follow_tests.log | head;
ab_follow|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_L2_FOLLOW_PREFETCH "0 experts dense 1" 3;
ab_follow_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_L2_FOLLOW_PREFETCH "0 experts dense 1" 2 --family v41;
stamps_tail|OUT=$OUT bash tools/gpu/stamps_ab.sh $b DEEPINFER_L2_FOLLOW_PREFETCH "0 1";
trace_tail|DEEPINFER_L2_FOLLOW_PREFETCH=1 OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true && head -14 $OUT/trace/trace_b1.txt;
ncu_fp4_tail|OUT=$OUT bash tools/gpu/ncu_sass_stalls.sh fp4wg_b1 fp4_wgmma_kernel 0 -- $b/roofline --gemm-only --quick --out $OUT/roofline_gemm.json > $OUT/ncu_fp4.log 2>&1 || true && tail -60 $OUT/ncu_sass_fp4wg_b1.txt'
exec bash "$(dirname "$0")/../device_call.sh"
