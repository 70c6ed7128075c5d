#!/usr/bin/env bash
# Fifth device call of session 24 (binaries of 155e64b, the session's defaults): the batch-1 step's timeline (the CUPTI
# trace, tools/gpu/trace_decode.sh) of V4 (16 layers) and V4.1 (10 layers), for the next session's per-layer picture.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session24_call5.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='trace|OUT=$OUT/v4 bash tools/gpu/trace_decode.sh 1 16 > /dev/null && head -30 $OUT/v4/trace_b1.txt;
trace_v41|OUT=$OUT/v41 bash tools/gpu/trace_decode.sh 1 10 --family v41 > /dev/null && head -30 $OUT/v41/trace_b1.txt'
exec bash "$(dirname "$0")/../device_call.sh"
