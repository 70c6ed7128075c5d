#!/usr/bin/env bash
# A first device call for session 28, prepared in session 27 (binaries: the main tree's .gpubin, session 27's last
# code commit 975e1d4 as packed; repack if the tree moved on):
#   - the GPU tests session 27 changed after its last run, compiled but not run: GpuMoe.Route*SameBits (one bench
#     helper), GpuMoe.KeptCountersSameBits (now also under v9's fused combine), GpuHcSiteSpread.CombinePartsMatch-
#     CombinedYBitwise (its y input and FP8 outputs in one place);
#   - batch-1 traces of both models at session 27's defaults (NOTES "Session 27": where V4.1's MoE time goes);
#   - V4.1 A/Bs of the existing MoE schedule switches: the shared expert forked after the routing
#     (DEEPINFER_MOE_SHARED_FIRST=0) and v9's pair kernels at batch 1 (DEEPINFER_MOE_DECODE=v9: the shared expert's
#     weights in the routed launches' rings, the combine in w2's epilogue).
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session28_call1.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='new_tests_tail|timeout 250 $b/test_gpu_model --gtest_filter="GpuMoe.Route*SameBits:GpuMoe.KeptCountersSameBits" > $OUT/new_model_tests.log 2>&1 || true && timeout 120 $b/test_gpu --gtest_filter="GpuHcSiteSpread.CombinePartsMatchCombinedYBitwise" > $OUT/site_tests.log 2>&1 || true && grep -chE "mismatches=[1-9]" $OUT/new_model_tests.log $OUT/site_tests.log || true && grep -hE "^\[  (PASSED|FAILED) |FAILED|OK \] .* ms" $OUT/new_model_tests.log $OUT/site_tests.log | head -20;
trace_v4|OUT=$OUT/trace_v4 bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true;
trace_v41|OUT=$OUT/trace_v41 bash tools/gpu/trace_decode.sh 1 10 --family v41 > /dev/null 2>&1 || true;
ab_shared_first_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_SHARED_FIRST "1 0" 2 --family v41;
ab_decode_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_DECODE "v9wide v9" 2 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
