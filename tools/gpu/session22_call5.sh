#!/usr/bin/env bash
# Fifth device call of session 22 (the binaries of run 130, DEEPINFER_STREAM_GRID=balanced set here = the default
# since c94a8f9): wo_b's quantization in its prologue (1, the default) against the separate quantize launch (0) in
# the step, V4 and V4.1 (alone the separate launch makes wo_b 1.5 us shorter: run 130's --fp8-phases rows).
#   usage (GPU machine, repo root): bash tools/gpu/session22_call5.sh
set -uo pipefail
export DEEPINFER_STREAM_GRID=balanced SKIP_SUITES=1
export EXTRA_GPU0='ab_prologue0|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_QUANT_PROLOGUE "0 1" 3;
ab_prologue0_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_QUANT_PROLOGUE "0 1" 3 --family v41'
exec bash "$(dirname "$0")/device_call.sh"
