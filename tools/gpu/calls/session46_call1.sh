#!/usr/bin/env bash
# Session 46: the older decode switches re-measured at today's defaults (no new code). Each of them was decided
# against the defaults of its own session (runs 48-196); the kernels around them have changed since (the routing
# selector, the spread mHC tail, the overlapped MXFP4 halves, the per-model routed PDL). Every arm flips one switch
# away from its default (docs/switches.md), alternated with the base twice, at batches 1 and 8 on both models. An arm
# that now gains beyond the base's spread is a default to revisit; the rest confirm the table's "Default from".
#   usage (GPU machine, repo root; .gpubin: test_gpu, v4_decode of this commit or later):
#     bash tools/gpu/calls/session46_call1.sh   (~5 min: GpuStreamFp4Wgmma.*, then ~70 runs of v4_decode --quick
#     --batches 1,8); QUICK=1: the V4 sweep alone at batch 1, no tests (~2 min, for a call on little device time)
set -uo pipefail
export SKIP_SUITES=1
V4="base: st3:DEEPINFER_STREAM_STAGES=3 st0:DEEPINFER_STREAM_STAGES=0 grid_full:DEEPINFER_STREAM_GRID=full"
V4+=" trig_last:DEEPINFER_STREAM_TRIGGER=last l2_dense:DEEPINFER_WEIGHT_L2_EVICT_FIRST=dense"
V4+=" qprolog0:DEEPINFER_FP8_QUANT_PROLOGUE=0 spare8:DEEPINFER_BRANCH_GEMV_SPARE_SMS=8"
V4+=" bps2:DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM=2 items_front:DEEPINFER_FP4_ITEMS=front"
V4+=" ticket_memset:DEEPINFER_MOE_TICKET=memset shared_after:DEEPINFER_MOE_SHARED_FIRST=0"
V4+=" gate_late:DEEPINFER_ROUTE_GATE=late disp_block:DEEPINFER_ROUTE_DISPATCH=block"
V4+=" sel_new:DEEPINFER_INDEX_SELECT=new fused0:DEEPINFER_DECODE_FUSED=0 tail_single:DEEPINFER_HC_SITE_TAIL=single"
V41="base: st3:DEEPINFER_STREAM_STAGES=3 st0:DEEPINFER_STREAM_STAGES=0 grid_full:DEEPINFER_STREAM_GRID=full"
V41+=" trig_last:DEEPINFER_STREAM_TRIGGER=last l2_dense:DEEPINFER_WEIGHT_L2_EVICT_FIRST=dense"
V41+=" qprolog0:DEEPINFER_FP8_QUANT_PROLOGUE=0 spare8:DEEPINFER_BRANCH_GEMV_SPARE_SMS=8"
V41+=" bps1:DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM=1 items_even:DEEPINFER_FP4_ITEMS=even"
V41+=" shared_after:DEEPINFER_MOE_SHARED_FIRST=0 gate_late:DEEPINFER_ROUTE_GATE=late"
V41+=" sel_ticket:DEEPINFER_CSA2_SELECTOR=ticket tail_single:DEEPINFER_HC_SITE_TAIL=single"
SWEEP="sweep_v4|OUT=\$OUT/sweep_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV '$V4' 2 --batches 1,8;
sweep_v41|OUT=\$OUT/sweep_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV '$V41' 2 --family v41 --batches 1,8"
if [ "${QUICK:-0}" = 1 ]; then
  export EXTRA_GPU0="sweep_v4|OUT=\$OUT/sweep_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV '$V4' 2 --batches 1"
  exec bash "$(dirname "$0")/../device_call.sh"
fi
# EXTRA_ONLY=1: print the sweep's steps and stop (session46_call2.sh runs them after its own).
if [ "${EXTRA_ONLY:-0}" = 1 ]; then printf '%s\n' "$SWEEP"; exit 0; fi
export EXTRA_GPU0="tests|\$b/test_gpu --gtest_filter='GpuStreamFp4Wgmma.*';
$SWEEP"
exec bash "$(dirname "$0")/../device_call.sh"
