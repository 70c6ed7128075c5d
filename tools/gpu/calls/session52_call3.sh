#!/usr/bin/env bash
# Written in session 52: helpers 155-156's patches on top of helper-152's (sq, measured in run 244), one call (~5 min).
#   v4_decode_sq       bench/gpu/attempts/session52_site_quant_exact_cuts.patch (the comparison base of the two below)
#   v4_decode_sqat     sq + session52_merge_held_splits.patch (helper-156: the attention merge epilogue's split
#                      partials loaded in one round trip at batch <= 2 and <= 24 splits (5 -> 1 on the 20-split
#                      layers), branch-free sums; the commit block's loads in one round trip; V4 ~1.1-1.3 %, V4.1
#                      ~2.3-2.7 % of batch 1 modelled)
#   v4_decode_sqnqat   sqat + session52_norm_quantize_rows.patch (helper-155: the query norm's quantize reads its row
#                      in one L2 round trip at <= 128 rows, codes in pairs; fp8_quantize on compile-time lanes; V4
#                      ~0.4-0.7 %, V4.1 ~0.8-1.2 % modelled)
#   test_gpu / test_gpu_model carry all three.
#   pack (here; ~35 min): /tmp/pack3.sh of session 52 (NOTES "Session 52"): v4_decode and v4_decode_sq from
#     session52_call2.sh's stage, the two builds above from build-cuda with the patches applied in that order,
#     stripped, one xz (in .gpubin3/, moved to .gpubin/ for the call).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session52_call3.sh (QUICK=1: batch 1, 2 repeats;
#          NO_TESTS=1: only the A/B).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(bin_ab_models ab_s52c "v4_decode v4_decode_sq v4_decode_sqat v4_decode_sqnqat")"
if [ "${NO_TESTS:-0}" != 1 ]; then
  attn='GpuSinkAttention.*:GpuAttentionPdl.*:GpuKvCache.*:GpuKvLists.*:GpuKvRecord*:GpuRmsNorm.*:GpuRope.*:GpuFp8Quantize.*'
  site='GpuHcLaggedSite.*:GpuMhc.*:GpuHcSiteSpread.*:GpuPdl.*:GpuMxfp4Experts.*:GpuFp8StepStamps.*'
  model='V4GpuForward.*:V41GpuForward.*:GpuPdlModel.*:GpuDecodeFused.*:GpuMoe*:GpuV41Modules.*:GpuV41SiteEntry.*'
  steps+=";
tests_attn|\$b/test_gpu --gtest_filter='$attn';
tests_site|\$b/test_gpu --gtest_filter='$site';
tests_invariance|\$b/test_gpu --gtest_filter='GpuBatchInvariance.*';
tests_model|\$b/test_gpu_model --gtest_filter='$model'"
fi
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
