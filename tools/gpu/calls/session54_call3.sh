#!/usr/bin/env bash
# Written in session 54: the landed state (v4_decode: + helper-159's query-norm factor, + helper-160's wo_a GEMV)
# against 0b7eb03 (v4_decode_s53), 8 alternating repeats, batches 1 / 8, both models, on whichever card comes (asked
# as nvidia-h200: the last H200 decode number is run 242); then one prefill-only roofline run (grouped GEMM against
# dense FP8). Same pack as session54_call2.sh. ~2.5 min.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session54_call3.sh (QUICK=1: 3 repeats)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(bin_ab_models ab_s54c "v4_decode_s53 v4_decode" 8 3)"
steps+=";
$(prefill_ab_steps roofline 1)"
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
