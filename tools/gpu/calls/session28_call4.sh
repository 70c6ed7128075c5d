#!/usr/bin/env bash
# Session 28's full check of its code (binaries of feb2f49): three losing switches deleted
# (DEEPINFER_STREAM_EARLY, DEEPINFER_BRANCH_GEMV_EXCLUSIVE, DEEPINFER_V41_SITE_COMBINE) and the branch GEMVs' blocks
# per SM a per-model default (V4 1, V4.1 2: run 157). The tests of the files changed (dense stream, mHC site entries,
# the V4.1 model, the branch grid, the MoE) and the V4 / V4.1 forwards against the CPU; then A/Bs of the branch grid
# on V4.1 (its new default against one block per SM; run 158 measured V4's) and, at one block per SM, of the shared
# expert's part of it on V4.1 (its own grid vs one per SM); V4's share of run 157's sweep (the switches not
# re-measured on V4 since sessions 18-23). Written for run 158, whose call was lost; the first call of session 29.
# Also the MXFP4 stream's leftover items on the first blocks (DEEPINFER_FP4_ITEMS=front, default even; compiled only in
# session 28): its bitwise test, A/Bs on both models and V4.1's in-step stamps in both forms; and the dense streams'
# balanced grid against the full one (DEEPINFER_STREAM_GRID): balanced, V4.1's shared w1|w3 at two blocks per SM is
# 144 blocks of 2 tiles, so 12 SMs carry 4 tiles and 120 carry 2 (NOTES "Session 28").
#   usage (GPU machine, repo root): bash tools/gpu/calls/session28_call4.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='kernel_tests|timeout 280 $b/test_gpu --gtest_filter="GpuStreamFp4Wgmma.FrontItemsSameBits:GpuFp8Gemm.Stream*:GpuFp8Gemm.QuantPrologueBitwise:GpuHcSiteSpread.*:GpuHcLaggedSite.*" > $OUT/kernel_tests.log 2>&1 || echo "rc=$?" && grep -chE "mismatches=[1-9]" $OUT/kernel_tests.log || true && grep -hE "^\[  (PASSED|FAILED) |FAILED " $OUT/kernel_tests.log | head;
model_tests|timeout 280 $b/test_gpu_model --gtest_filter="V41GpuForward.*:V4GpuForward.GreedyDecodeFollowsTheCpuForward:V4GpuForward.RunToRunBitwiseEagerAndGraphs:GpuBranchGemvGrid.*:GpuMoeSiteCombine.*:GpuPdlModel.*:GpuMoe.*" > $OUT/model_tests.log 2>&1 || echo "rc=$?" && grep -chE "mismatches=[1-9]" $OUT/model_tests.log || true && grep -hE "^\[  (PASSED|FAILED) |FAILED " $OUT/model_tests.log | head;
ab_score_shape_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_INDEX_SCORE_SHAPE "auto 64x2 64x1 32x1" 2;
ab_site_tail_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_HC_SITE_TAIL "spread single" 2;
ab_index_query_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_INDEX_QUERY "first before_join" 2;
ab_stages_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_STAGES "2 3" 2;
ab_trigger_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_TRIGGER "entry last" 2;
ab_items_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_ITEMS "even front" 3 --family v41;
ab_items_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_ITEMS "even front" 3;
stamps_even_v41|DEEPINFER_FP4_ITEMS=even timeout 150 $b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out $OUT/fp4_stamps_v41_even.json > $OUT/fp4_stamps_v41_even.log 2>&1 || true && grep -E "^ *all " $OUT/fp4_stamps_v41_even.log | cut -c1-200;
stamps_front_v41|DEEPINFER_FP4_ITEMS=front timeout 150 $b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out $OUT/fp4_stamps_v41_front.json > $OUT/fp4_stamps_v41_front.log 2>&1 || true && grep -E "^ *all " $OUT/fp4_stamps_v41_front.log | cut -c1-200;
ab_grid_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_GRID "balanced full" 2 --family v41;
ab_grid_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_GRID "balanced full" 2;
ab_blocks_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM "2 1" 2 --family v41;
ab_shared_grid_v41|DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM=1 OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_SHARED_EXPERT "1 0" 2 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
