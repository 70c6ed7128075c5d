#!/usr/bin/env bash
# Session 29, second call (binaries of 4f2fb2b): the test half of session28_call4.sh. The kernel tests of session 28's
# changes (FrontItemsSameBits, the dense streams, the mHC site spread and lagged entry) and the model tests (the V4 /
# V4.1 forwards against the CPU, run-to-run, the branch grid, the MoE, PDL), then V4's share of run 157's sweep (the
# switches not re-measured on V4 since sessions 18-23) and V4.1's shared-expert part of the branch grid.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session29_call2.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='kernel_tests|timeout 200 $b/test_gpu --gtest_filter="GpuStreamFp4Wgmma.FrontItemsSameBits:GpuFp8Gemm.Stream*:GpuFp8Gemm.QuantPrologueBitwise:GpuHcSiteSpread.*:GpuHcLaggedSite.*" > $OUT/kernel_tests.log 2>&1 || echo "rc=$?" && grep -chE "mismatches=[1-9]" $OUT/kernel_tests.log || true && grep -hE "^\[  (PASSED|FAILED) |FAILED " $OUT/kernel_tests.log | head;
model_tests|timeout 220 $b/test_gpu_model --gtest_filter="V41GpuForward.*:V4GpuForward.GreedyDecodeFollowsTheCpuForward:V4GpuForward.RunToRunBitwiseEagerAndGraphs:GpuBranchGemvGrid.*:GpuMoeSiteCombine.*:GpuPdlModel.*:GpuMoe.*" > $OUT/model_tests.log 2>&1 || echo "rc=$?" && grep -chE "mismatches=[1-9]" $OUT/model_tests.log || true && grep -hE "^\[  (PASSED|FAILED) |FAILED " $OUT/model_tests.log | head;
ab_score_shape_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_INDEX_SCORE_SHAPE "auto 64x2 32x1" 1;
ab_site_tail_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_HC_SITE_TAIL "spread single" 1;
ab_index_query_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_INDEX_QUERY "first before_join" 1;
ab_shared_grid_v41|DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM=1 OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_SHARED_EXPERT "1 0" 1 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
