#!/usr/bin/env bash
# Written in session 53 (after a failed start left 496 device seconds: the full suites no longer fit): what the
# session landed, timed against where it started, on whichever card comes (asked as nvidia-h200 for an H200 number
# of the landed state): v4_decode_s52 = eeef166 (session 52's landing; run 250's base build), v4_decode = 5b5e97b (+
# V4's spread-site rounds, + helper-155's query-norm quantize). 4 alternating repeats, batches 1 / 8, both models;
# then the end-to-end forward tests (V4 / V4.1 logits against the CPU path) at 5b5e97b, as far as the call's time goes.
#   pack (here): the two v4_decode builds + test_gpu / test_gpu_model at 5b5e97b, stripped, one xz in .gpubin/.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session53_call4.sh (~4 min + the forward tests).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(bin_ab_step ab_s53d_v4 "v4_decode_s52 v4_decode" 4 "--batches 1,8")"
steps+=";
$(bin_ab_step ab_s53d_v41 "v4_decode_s52 v4_decode" 4 "--family v41 --batches 1,8")"
steps+=";
tests_forward|\$b/test_gpu_model --gtest_filter='V4GpuForward.*:V41GpuForward.*'"
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
