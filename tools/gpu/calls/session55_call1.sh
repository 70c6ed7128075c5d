#!/usr/bin/env bash
# Written in session 55: three compiled-not-run patches timed against main (20e3b12's sources), on whichever card
# comes (asked as nvidia-h200: the last H200 number is run 242, session 52). Builds:
#   v4_decode        main
#   v4_decode_fpq    + bench/gpu/attempts/session54_fp8_quantize_runtime_lanes.patch (the MoE's activation quantize
#                    at runtime lanes, eeef166's form: the last untested piece of 895d058 for V4 batch 8's ~0.5 % cost)
#   v4_decode_rmsq   + bench/gpu/attempts/session55_norm_quantize_loop_merge.patch (the prefill norm-quantize kernel's
#                    tail through quantize_store_vec: a merge whose SASS changed 600 -> 608; its 4K prefill rate is
#                    the column that matters)
#   roofline_slot    + bench/gpu/attempts/session54_prefill_v13_slot_release_before_store.patch (helper-163: v13's
#                    clean items release their scale slot before the stores), against roofline (main)
# 8 alternating repeats, batches 1 / 8, both models (~3 min), the prefill A/B (5 alternating rounds, ~50 s), then the tests of the touched
# kernels with all three patches.
#   pack (here): S=bench/gpu/attempts; KEEP_STAGE=/tmp/st55a tools/gpu/pack_patch_ab.sh \
#     fpq=$S/session54_fp8_quantize_runtime_lanes.patch rmsq=$S/session55_norm_quantize_loop_merge.patch \
#     slot:roofline=$S/session54_prefill_v13_slot_release_before_store.patch
#   usage (GPU machine, repo root): bash tools/gpu/calls/session55_call1.sh (QUICK=1: 3 repeats).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(bin_ab_models ab_s55 "v4_decode v4_decode_fpq v4_decode_rmsq" 8 3)"
steps+=";
$(prefill_ab_steps "roofline roofline_slot" 5)"
steps+=";
$(filtered_tests_steps 'GpuRmsNorm.*:GpuFp8Quantize.*:GpuQuantPrologue.*:GpuMoePrefillGemm.*:GpuMoe.*:GpuDecodeFused.*:GpuBatchInvariance.*')"
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
