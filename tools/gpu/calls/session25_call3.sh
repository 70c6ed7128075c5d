#!/usr/bin/env bash
# Third device call of session 25 (binaries with wq_a's optional hold of its PDL dependents, DEEPINFER_WQ_A_HOLD, beside
# the query norm in wq_b's prologue, DEEPINFER_FP8_NORM_PROLOGUE; the W8A16 quantizing epilogue of call 2 removed):
# same-call A/Bs of the norm prologue 0|1 with the hold on (V4 16 layers, V4.1 10), and the prologue with the hold off
# again beside them. No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session25_call3.sh
# Needs binaries built from bench/gpu/attempts/session25_run144.patch applied on a770a8a (branch
# attempt/s25-fused-prologues, commit b6c3b32): the switch it measures lost and is not on main.
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='ab_hold|DEEPINFER_WQ_A_HOLD=1 OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_NORM_PROLOGUE "0 1" 3;
ab_hold_v41|DEEPINFER_WQ_A_HOLD=1 OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_NORM_PROLOGUE "0 1" 3 --family v41;
ab_nohold|DEEPINFER_FP8_NORM_PROLOGUE=1 OUT=$OUT/v4n bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_WQ_A_HOLD "0 1" 2'
exec bash "$(dirname "$0")/../device_call.sh"
