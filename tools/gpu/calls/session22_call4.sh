#!/usr/bin/env bash
# Fourth device call of session 22 (the binaries of run 130; DEEPINFER_STREAM_GRID=balanced set here, the default of
# the commit after them): the dense stream's ring depth again now that the balanced grid runs fewer blocks on some
# products (V4.1 wo_b 160 blocks: fewer bytes in flight per SM), V4 and V4.1; one traced batch-1 V4 step.
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session22_call4.sh
set -uo pipefail
export DEEPINFER_STREAM_GRID=balanced SKIP_SUITES=1
export EXTRA_GPU0='ab_stages|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_STAGES "2 3 4" 2;
ab_stages_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_STAGES "2 3 4" 2 --family v41;
trace_tail|OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true && head -16 $OUT/trace/trace_b1.txt'
exec bash "$(dirname "$0")/../device_call.sh"
