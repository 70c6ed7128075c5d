#!/usr/bin/env bash
# Written in session 49 (no machine was lent: three failed starts, then loans paused), for the next session: the
# eight compiled-not-run patch sets of bench/gpu/attempts/ as one BIN A/B against the base, the ten builds
# alternating so drift hits all of them (run 239: ~3.5 s a v4_decode run, so ~2 min a model at 3 repeats);
# test_gpu / test_gpu_model carry every patch (the tests of every patched kernel):
#   v4_decode_audit4       session48_audit4_stream_consumers.patch (helper-132: the MXFP4 stage_b's scales with its
#                          codes; the dense FP8 stream's first weight-scale line prefetched to L1 before its wait)
#   v4_decode_fp4_consume  audit4 + session49_fp4_consume_constant_block.patch (helper-139: the MXFP4 consume loop
#                          with the activation block a compile-time constant, 513 -> 473 instructions a stage at V4)
#   v4_decode_fp4_scales   fp4_consume + session49_fp4_scales_by_batch.patch (helper-140: V4.1's staged activation
#                          scales laid out by fold batch, one LDS.128 for a fold's 4 scales: 509 -> 487 a stage)
#   v4_decode_rows_ahead   session49_split_rows_ahead.patch (helper-133: the attention split's pool rows one tile
#                          ahead; batch 8)
#   v4_decode_route_fence  session49_route_ticket_after_fence.patch (helper-135: the routing's ticket zeroed after
#                          its acquire fence; the hash rows' experts before the poll)
#   v4_decode_gemv_pin     session49_gemv_pin_before_wait.patch (helper-134: wo_a's one-token GEMV and the GEMV pair
#                          compute their addresses before the PDL wait)
#   v4_decode_site_norm    session49_site_norm_weight_early.patch (helper-137: the mHC spread site's norm weights
#                          before its polls; the FP8 scale index by mask and shift)
#   v4_decode_select_keys  session49_select_keys_in_rounds.patch (helper-136: the decode selects' keys in rounds)
#   v4_decode_all          all of them
#   pack (here; ~35 min on 2 cores, launch.h's patch rebuilds most sources twice):
#     ALL=1 tools/gpu/pack_patch_ab.sh audit4=bench/gpu/attempts/session48_audit4_stream_consumers.patch \
#       fp4_consume=bench/gpu/attempts/session48_audit4_stream_consumers.patch+bench/gpu/attempts/session49_fp4_consume_constant_block.patch \
#       fp4_scales=bench/gpu/attempts/session48_audit4_stream_consumers.patch+bench/gpu/attempts/session49_fp4_consume_constant_block.patch+bench/gpu/attempts/session49_fp4_scales_by_batch.patch \
#       rows_ahead=bench/gpu/attempts/session49_split_rows_ahead.patch \
#       route_fence=bench/gpu/attempts/session49_route_ticket_after_fence.patch \
#       gemv_pin=bench/gpu/attempts/session49_gemv_pin_before_wait.patch \
#       site_norm=bench/gpu/attempts/session49_site_norm_weight_early.patch \
#       select_keys=bench/gpu/attempts/session49_select_keys_in_rounds.patch
#   usage (GPU machine, repo root): bash tools/gpu/calls/session49_call1.sh   (~6 min; QUICK=1: batch 1, 2 repeats)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
bins="v4_decode v4_decode_audit4 v4_decode_fp4_consume v4_decode_fp4_scales v4_decode_rows_ahead v4_decode_route_fence"
bins+=" v4_decode_gemv_pin v4_decode_site_norm v4_decode_select_keys v4_decode_all"
filter='GpuFp8Gemm.*:GpuStreamFp4Wgmma.*:GpuMxfp4Experts.*:GpuFp4HalfOverlap.*:GpuMoe.*:GpuRouteSelector.*'
filter+=':GpuSinkAttention.*:GpuAttentionPdl.*:GpuKvLists.*:GpuPdl.*:GpuPdlModel.*'
filter+=':GpuBf16Gemv.*:GpuW8A16.*:GpuDecodeFused.*:GpuBranchGemvGrid.*:GpuCompressorBranch.*'
filter+=':GpuHcSiteSpread.*:GpuMhc.*:GpuHcLaggedSite.*:GpuV41SiteEntry.*:GpuSiteMixBranch.*'
filter+=':GpuCompressorIndexer.*:GpuCsa2SelectBins.*:GpuCsa2ScoreShape.*:GpuV41Modules.*:GpuIndexScoreShape.*'
export EXTRA_GPU0="$(filtered_tests_steps "$filter");
$(bin_ab_models ab_s49 "$bins")"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
