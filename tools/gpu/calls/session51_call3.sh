#!/usr/bin/env bash
# Written in session 51 for the next session (its device time ran out): helper-150's cluster form of V4.1's lagged
# pre-site and helper-148's FP4 scales, each against main, with the tests run 240 left unrun (GpuStreamFp4Wgmma.*
# and four GpuFp8Gemm tests of the MXFP4 / FP8 stream patches landed in 1f69135) and the tests of both patches.
#   v4_decode_spread   bench/gpu/attempts/session51_lagged_site_spread_cluster.patch (V4.1: ~1-2.5 % expected at
#                      batch 1; DEEPINFER_HC_LAGGED_SITE=single is its off switch, so a switch A/B of this one build
#                      also works)
#   v4_decode_fp4s     bench/gpu/attempts/session51_fp4_scale_branch_free.patch (~30 ns a kernel: correctness first)
#   v4_decode_all      both
#   pack (here, ~15 min on 2 cores from a built build-cuda): A=bench/gpu/attempts; ALL=1 tools/gpu/pack_patch_ab.sh \
#     spread=$A/session51_lagged_site_spread_cluster.patch fp4s=$A/session51_fp4_scale_branch_free.patch
#     (helper-149's session51_head_site_no_stream_store.patch conflicts with the spread patch in mhc.cu and gains
#     ~0.13 us a step: left out).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session51_call3.sh (~5 min; QUICK=1: batch 1, 2 repeats;
#          NO_TESTS=1 only the A/B).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(bin_ab_models ab_s51c "v4_decode v4_decode_spread v4_decode_fp4s v4_decode_all")"
if [ "${NO_TESTS:-0}" != 1 ]; then
  steps+=";
$(stream_site_tests_steps)"
fi
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
