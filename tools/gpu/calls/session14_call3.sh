#!/usr/bin/env bash
# Third device call of session 14 (binaries of 0eec32e): every one-GPU suite with the new defaults (bf16 GEMV pair at
# one row, V4.1 fused site entry only, CSA2 decode select by bins only), then where the fused routing's in-step time
# goes: its phases alone with the TLBs thrashed (roofline --route-phases-only, "tlb=thrashed") and its in-model stamps
# in a 4-layer model, shared expert after and PDL off (nothing beside it, few layers between two launches).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session14_call3.sh
set -uo pipefail
export EXTRA_GPU0='route_phases_tlb_tail|$b/roofline --route-phases-only --out $OUT/route_phases_tlb.json;
route_stamps_4l_tail|DEEPINFER_MOE_SHARED_FIRST=0 $b/v4_decode --quick --layers 4 --pdl off --route-stamps --out $OUT/rs_v4_4l.json'
exec bash "$(dirname "$0")/../device_call.sh"
