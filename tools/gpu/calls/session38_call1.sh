#!/usr/bin/env bash
# Session 38, first call: the batch-1 step's real timeline at today's defaults (the last traces were runs 89-93,
# session 15, before the selectors, the merge epilogue and the routed-stream changes). tools/gpu/trace_decode.sh
# (CUPTI, every graph node as it ran, PDL overlap included) for 16 layers of each model, then the ncu kernel table
# of a 4-layer V4.1 step (run 203 has V4's).
#   usage (GPU machine, repo root; .gpubin: v4_decode): bash tools/gpu/calls/session38_call1.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="trace_v4|OUT=\$OUT/trace_v4 bash tools/gpu/trace_decode.sh 1 16;
trace_v41|OUT=\$OUT/trace_v41 bash tools/gpu/trace_decode.sh 1 16 --family v41;
prof_v41|NCU_TIMEOUT=240 bash tools/gpu/profile_decode.sh 1 4 v41"
exec bash "$(dirname "$0")/../device_call.sh"
