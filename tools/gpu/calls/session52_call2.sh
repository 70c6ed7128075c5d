#!/usr/bin/env bash
# Written in session 52: helpers 152-154's patches against main at 95d3ac5 (the cluster lagged pre-site and the
# 16-row prefill chunks landed), one call (~5 min).
#   v4_decode_sq        bench/gpu/attempts/session52_site_quant_exact_cuts.patch (helper-152: the mHC pre-sites'
#                       quantizer tails: codes in pairs, compile-time shuffle rounds, no rsqrt guard, amax as a tree;
#                       ~0.15-0.2 % of V4.1 batch 1 expected, ~0.1 % V4)
#   v4_decode_fe        session51_fp4_scale_branch_free.patch + session52_e2m1_round_branch_free.patch (helpers
#                       148 + 153: the FP4 scales and the e2m1 rounding without division or branches; fp4s alone was
#                       flat in run 242; < 0.1 % expected)
#   v4_decode_all       every patch
#   roofline_pscales    session52_prefill_scales_before_wait.patch (helper-154 lever 4: V4.1's act-32 token scales
#                       loaded before each wgmma wait; 0-2 % of V4.1's grouped GEMM)
#   roofline_pstages    pscales + session52_prefill_v9s_six_stages.patch (lever 3: V4.1 w2 at 6 stages of 160
#                       tokens; 0-5 % of w2 only)
#   pack (here; ~50 min on 2 cores, fp8_quant.cuh reaches most kernels): A=bench/gpu/attempts; ALL=1 \
#     tools/gpu/pack_patch_ab.sh sq=$A/session52_site_quant_exact_cuts.patch \
#     fe=$A/session51_fp4_scale_branch_free.patch+$A/session52_e2m1_round_branch_free.patch \
#     pscales:roofline=$A/session52_prefill_scales_before_wait.patch \
#     pstages:roofline=$A/session52_prefill_scales_before_wait.patch+$A/session52_prefill_v9s_six_stages.patch
#   usage (GPU machine, repo root): bash tools/gpu/calls/session52_call2.sh (QUICK=1: batch 1, 2 repeats;
#          NO_TESTS=1: only the A/Bs).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(bin_ab_models ab_s52b "v4_decode v4_decode_sq v4_decode_fe v4_decode_all")"
steps+=";
$(prefill_ab_steps "roofline roofline_pscales roofline_pstages")"
if [ "${NO_TESTS:-0}" != 1 ]; then
  site='GpuHcLaggedSite.*:GpuV41SiteEntry.*:GpuMhc.*:GpuHcSiteSpread.*:GpuSiteMixBranch.*'
  fp4='GpuCompressor*:GpuCsa2*:GpuKvRecord*:GpuIndex*:GpuV41Modules.*:V41GpuForward.KvFormatsBitwise:V4GpuForward.KvFormatsBitwise'
  steps+=";
tests_kernels|\$b/test_gpu --gtest_filter='$site:$fp4:GpuMoePrefillGemm.*';
tests_model|\$b/test_gpu_model --gtest_filter='$site:$fp4'"
fi
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
