#!/usr/bin/env bash
# Written in session 54: every single-GPU `gpu` test at the landed state (helper-159's query-norm factor and
# helper-160's wo_a GEMV on 0b7eb03); the last full run was run 213. test_gpu beside both halves of test_gpu_model
# (device_call.sh's one-GPU layout, ~9 min), nothing else: the call must fit one 600 s command.
#   pack (here): build-cuda's test_gpu, test_gpu_model, v4_decode, roofline at the landing, plus the previous main's
#   v4_decode as v4_decode_s53 (for session54_call3.sh), stripped, one xz in .gpubin/.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session54_call2.sh
set -uo pipefail
unset SKIP_SUITES EXTRA_GPU0 EXTRA_GPU1
exec bash "$(dirname "$0")/../device_call.sh"
