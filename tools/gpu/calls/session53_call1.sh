#!/usr/bin/env bash
# Written in session 53: helper-152's pre-site cuts (bench/gpu/attempts/session52_site_quant_exact_cuts.patch) one at a
# time, to find the one behind V4 batch 8's +0.5-0.7 % (runs 244-245). The pack's sets:
#   v4_decode            main at eeef166
#   v4_decode_pairs      + the FP8 codes two values a conversion (cvt.rn.satfinite.e4m3x2.f32)
#   v4_decode_rounds     + the amax shuffle rounds for a compile-time block (V4's 16 lanes in the spread tail, V4.1's 4
#                        in the cluster pre-site)
#   v4_decode_rsqrt      + the RMS factor's rsqrt without its subnormal guard (eps >= FLT_MIN)
#   v4_decode_tree       + the block amax as a tree of 3 FMNMX levels
#   v4_decode_branch     + one scale-store branch for hc_site_pre's 5 steps
#   v4_decode_all        all five (helper-152's patch, its pair conversion kept in mhc.cu)
# The split: session53_sq_base.patch (helper-152's patch with a compile-time switch a cut, all off: every mhc.cu
# kernel has HEAD's SASS, tools/gpu/sass_same.sh) and a one-line patch a switch (session53_sq_cut_*.patch).
#   pack (here; ~20 min on 2 cores, mhc.cu only): S=bench/gpu/attempts; ALL=1 tools/gpu/pack_patch_ab.sh \
#     pairs=$S/session53_sq_base.patch+$S/session53_sq_cut_pairs.patch rounds=... rsqrt=... tree=... branch=...
#   usage (GPU machine, repo root): bash tools/gpu/calls/session53_call1.sh (QUICK=1: batch 1, 2 repeats;
#          NO_TESTS=1: only the A/Bs). ~5 min.
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
bins="v4_decode v4_decode_pairs v4_decode_rounds v4_decode_rsqrt v4_decode_tree v4_decode_branch v4_decode_all"
steps="$(bin_ab_models ab_s53a "$bins" 4 2)"
if [ "${NO_TESTS:-0}" != 1 ]; then
  site='GpuHcLaggedSite.*:GpuV41SiteEntry.*:GpuMhc.*:GpuHcSiteSpread.*:GpuSiteMixBranch.*:GpuPdlModel.*'
  steps+=";
$(filtered_tests_steps "$site")"
fi
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
