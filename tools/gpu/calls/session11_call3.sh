#!/usr/bin/env bash
# Session 11's third device call (binaries of 4ea1a49): same-call A/B of how the routing counters are zeroed
# (DEEPINFER_MOE_TICKET memset vs kernel) with the shared expert before the routing, of the shared expert's place with
# the memset, and of the shared expert's place on V4.1-Flash (10 layers).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session11_call3.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='ab_ticket_shared1|DEEPINFER_MOE_SHARED_FIRST=1 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_TICKET "memset kernel" 3;
ab_shared_memset|DEEPINFER_MOE_TICKET=memset bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_SHARED_FIRST "0 1" 3;
ab_shared_v41|DEEPINFER_MOE_TICKET=memset bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_SHARED_FIRST "0 1" 2 --family v41;
trace_memset_shared_tail|mkdir -p $OUT/ms1 && DEEPINFER_MOE_TICKET=memset DEEPINFER_MOE_SHARED_FIRST=1 OUT=$OUT/ms1 bash tools/gpu/trace_decode.sh 1 16 | head -12'
exec bash "$(dirname "$0")/../device_call.sh"
