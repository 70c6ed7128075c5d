#!/usr/bin/env bash
# Fourth device call of session 13 (same binaries as call 3): run 80's batch-1 timeline shows the fused routing kernel
# at 17-20 us per layer beside the shared expert's stream while it takes ~9 us alone (run 76 route phases), so
# (1) the shared expert's fork point A/B now that the routing is faster (DEEPINFER_MOE_SHARED_FIRST 1 / 0), with the
# timeline of the fork-after form; (2) the cluster split + merge attention (DEEPINFER_DECODE_FUSED_ATTENTION, slower in
# session 4) against today's chain; (3) the V4.1 batch-1 timeline.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session13_call4.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='ab_shared_first|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_SHARED_FIRST "1 0" 2;
ab_fused_attention|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_DECODE_FUSED_ATTENTION "0 1" 2;
trace_shared_after|OUT=$OUT/shared_after DEEPINFER_MOE_SHARED_FIRST=0 bash tools/gpu/trace_decode.sh 1 16;
trace_v41|OUT=$OUT/v41 bash tools/gpu/trace_decode.sh 1 10 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
