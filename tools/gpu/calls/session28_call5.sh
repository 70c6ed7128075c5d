#!/usr/bin/env bash
# Session 28, the last device call (run 158; ~270 s of device time were left after two calls the machine was taken
# back from): the smallest check of the session's code (three switches deleted, the per-model branch grid) and V4's
# branch grid A/B. session28_call4.sh is the full form (the V4 sweep, V4.1's shared-expert part, the V4 / V4.1
# prefill-and-chunk forwards) for the next session.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session28_call5.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='kernel_tests|timeout 60 $b/test_gpu --gtest_filter="GpuFp8Gemm.StreamGridCapBitwise:GpuFp8Gemm.StreamEntryTriggerChainBitwise:GpuHcSiteSpread.CombinePartsMatchCombinedYBitwise:GpuHcLaggedSite.MatchesChainBitwise" > $OUT/kernel_tests.log 2>&1; echo rc=$? && grep -chE "mismatches=[1-9]" $OUT/kernel_tests.log; grep -hE "^\[  (PASSED|FAILED) |FAILED " $OUT/kernel_tests.log | head;
model_tests|timeout 90 $b/test_gpu_model --gtest_filter="V41GpuForward.GreedyDecodeFollowsTheCpuForward:V41GpuForward.RunToRunBitwiseEagerAndGraphs:V4GpuForward.GreedyDecodeFollowsTheCpuForward:GpuBranchGemvGrid.*:GpuMoeSiteCombine.*" > $OUT/model_tests.log 2>&1; echo rc=$? && grep -chE "mismatches=[1-9]" $OUT/model_tests.log; grep -hE "^\[  (PASSED|FAILED) |FAILED " $OUT/model_tests.log | head;
ab_blocks_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM "1 2" 2'
exec bash "$(dirname "$0")/../device_call.sh"
