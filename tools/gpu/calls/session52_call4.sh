#!/usr/bin/env bash
# Written in session 52: what it landed, timed. v4_decode = 95d3ac5 (the cluster lagged pre-site and the 16-row
# prefill chunks landed); v4_decode_landed = that + helper-156's merge (session52_merge_held_splits.patch) + helper-154's
# prefill scales (session52_prefill_scales_before_wait.patch; prefill only). 5 alternating repeats, batches 1 / 8,
# both models (~2 min). Pack: those two v4_decode builds, stripped, one xz in .gpubin/ (no tests: run 245's carried
# the merge patch and passed).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(bin_ab_step ab_s52d_v4 "v4_decode v4_decode_landed" 5 "--batches 1,8")"
steps+=";
$(bin_ab_step ab_s52d_v41 "v4_decode v4_decode_landed" 5 "--family v41 --batches 1,8")"
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
