#!/usr/bin/env bash
# First device call of session 21 (binaries of 41a0f29, every session-20 default; a fresh build on a new machine):
#   - the select's and the routing's in-step stamps (their shared cuda/stamp_records.h was compiled, not run), with
#     the old L2 prefetch branch off and on;
#   - the L2 prefetch branch again (bench/gpu/NOTES.md "L2 prefetch of the next GEMV's weights": +3.1 % in session 7,
#     when the weight streams still flushed L2; now they read evict_first): same-call A/B on V4 and V4.1, then each
#     fork point alone (V4);
#   - one traced batch-1 V4 step at the defaults.
# No suites (the session's last call runs them). A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session21_call1.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='stamps_tail|OUT=$OUT bash tools/gpu/stamps_ab.sh $b DEEPINFER_L2_PREFETCH "0 1";
ab_l2_prefetch|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_L2_PREFETCH "0 1" 3;
ab_l2_prefetch_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_L2_PREFETCH "0 1" 3 --family v41;
ab_l2_points|DEEPINFER_L2_PREFETCH=1 OUT=$OUT/pts bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_L2_PREFETCH_POINTS "1 2 3 4" 1;
ab_l2_modes|DEEPINFER_L2_PREFETCH=1 OUT=$OUT/modes bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_L2_PREFETCH_MODE "bulk line_last" 1;
trace_tail|OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true && head -14 $OUT/trace/trace_b1.txt'
exec bash "$(dirname "$0")/../device_call.sh"
