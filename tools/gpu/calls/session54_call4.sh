#!/usr/bin/env bash
# Written in session 54, its last call: two decode arms for run 254's V4 batch-8 cost of session 53's query-norm
# landing (895d058), and helper-162's V4 prefill lever, on whichever card comes (asked as nvidia-h200). Builds:
#   v4_decode        main (0f02367's sources)
#   v4_decode_nq1    + bench/gpu/attempts/session54_norm_rows_one_row.patch (the query norm's held-row kernel at one
#                    row only: batch 8 runs the loop form, as eeef166 did)
#   v4_decode_kvw    + bench/gpu/attempts/session54_kv_norm_no_weight_prefetch.patch (the KV norm-rope kernel without
#                    895d058's weight lines towards L1)
#   roofline_xp      + bench/gpu/attempts/session54_prefill_v13_expand_under_group.patch (helper-162: v13 at NT 11 / 12
#                    expands the next tile under the in-flight wgmma group; +2-8 % of V4 w13 / w2 modelled), against
#                    roofline (main), 3 alternating `--prefill-only --prefill-16k --quick` runs each
# 8 alternating repeats, batches 1 / 8, both models (~3 min), the prefill A/B (~30 s), then the norm / prefill GEMM /
# decode tests with all three patches.
#   pack (here, ~25 min): S=bench/gpu/attempts; KEEP_STAGE=/tmp/st54x tools/gpu/pack_patch_ab.sh \
#     nq1=$S/session54_norm_rows_one_row.patch kvw=$S/session54_kv_norm_no_weight_prefetch.patch \
#     xp:roofline=$S/session54_prefill_v13_expand_under_group.patch
#   usage (GPU machine, repo root): bash tools/gpu/calls/session54_call4.sh (QUICK=1: 3 repeats).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(bin_ab_models ab_s54d "v4_decode v4_decode_nq1 v4_decode_kvw" 8 3)"
steps+=";
$(prefill_ab_steps "roofline roofline_xp")"
steps+=";
$(filtered_tests_steps 'GpuRmsNorm.*:GpuRope.*:GpuKvCache.*:GpuMoePrefillGemm.*:GpuPdlModel.*:GpuDecodeFused.*:GpuBatchInvariance.*')"
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
