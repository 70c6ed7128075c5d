#!/usr/bin/env bash
# First device call of session 24 (binaries of f7c861e, the kernels of HEAD): zero-code A/Bs of two switches whose
# last measurements predate most of the dense stream's changes (entry trigger, balanced grid, evict_first weights):
#   - DEEPINFER_STREAM_STAGES=2|3|4: the dense FP8 ring depth (2 since session 13; run 134's stamps show the
#     producer waiting on `empty` 3.4-5.0 us a launch, i.e. a full ring);
#   - DEEPINFER_STREAM_FP8=default|wgmma: the wgmma consumer for the products without the quantizing prologue
#     (last measured in run 58, +3.7 % then).
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session24_call1.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='ab_stages|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_STAGES "2 3 4" 2;
ab_fp8wg|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_FP8 "default wgmma" 2;
ab_stages_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_STAGES "2 3 4" 2 --family v41;
ab_fp8wg_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_FP8 "default wgmma" 2 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
