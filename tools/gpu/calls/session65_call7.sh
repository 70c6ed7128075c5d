#!/usr/bin/env bash
# Session 65: the branch GEMVs' grid on the H100 at ef96c19d. Run 291's V4 trace has the CSA layers' index select on
# the batch-1 critical path at ~15.5 us (alone ~6-7 us) beside the attention's wq_b on the query branch (19.4 us for
# 33.5 MB): the select's blocks wait for SM room. The branch grid (DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM /
# _SPARE_SMS, step_model_base.h: wq_b on the query branch and the shared expert beside the routing) was tuned on the
# H200 in sessions 20-28 (run 114: one block per SM; 16 spare SMs a little slower there). Same-call A/B of the
# environment sets, V4 and V4.1, batches 1 and 8, 3 repeats; no build (the pack's v4_decode at ef96c19d's engine).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session65_call7.sh   (~120 s)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
spare=DEEPINFER_BRANCH_GEMV_SPARE_SMS per_sm=DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM
v4="base: s8:$spare=8 s16:$spare=16 s32:$spare=32 b2:$per_sm=0"
v41="base: s8:$spare=8 s16:$spare=16 s32:$spare=32 b1:$per_sm=1"
export EXTRA_GPU0="grid_v4|OUT=\$OUT/grid_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV \"$v4\" 3 --batches 1,8;
grid_v41|OUT=\$OUT/grid_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV \"$v41\" 3 --family v41 --batches 1,8"
clock_logged
