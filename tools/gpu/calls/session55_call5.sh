#!/usr/bin/env bash
# Written in session 55: one R / smallest-scale pass for every prefill kernel (`row_scale_range`, the byte form
# helper-165 wrote for v13; v3 / v5 / v8 / v9 had two copies of the __vmaxu4 form) against main (6115a17), 8
# alternating `--prefill-only --prefill-16k --quick` runs each: V4.1's rows (v9 at act block 32) are the ones it
# changes; then the prefill GEMM's bitwise tests with it. Builds:
#   roofline       main
#   roofline_rsr   + bench/gpu/attempts/session55_prefill_row_scale_range.patch
#   pack (here): KEEP_STAGE=/tmp/st55d tools/gpu/pack_patch_ab.sh \
#     rsr:roofline=bench/gpu/attempts/session55_prefill_row_scale_range.patch
#   usage (GPU machine, repo root): bash tools/gpu/calls/session55_call5.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(prefill_ab_steps "roofline roofline_rsr" 8)"
steps+=";
$(filtered_tests_steps 'GpuMoePrefillGemm.*:GpuMoe.*')"
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
