#!/usr/bin/env bash
# Written in session 54 for its last ~380 device seconds: an H200 number of the landed state (asked as nvidia-h200; the
# last H200 decode number is run 242): v4_decode at 0f02367 (the decode code of 4e4c1e6), 3 repeats, batches 1 / 8,
# both models, and one prefill-only roofline run at 4e4c1e6 (helper-162's v13). ~80 s.
#   pack (here): run 257's v4_decode and roofline_xp (as roofline), one xz in .gpubin/.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session54_call5.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(bin_ab_models ab_s54e "v4_decode" 3)"
steps+=";
$(prefill_ab_steps roofline 1)"
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
