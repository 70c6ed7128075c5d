#!/usr/bin/env bash
# Session 28, second device call (run 156): does V4.1's routed w1|w3 start late because the shared expert's blocks
# hold its SMs? Run 128's in-step stamps put the last of its 132 blocks 6.7 us after the first (V4: 1.7), and the
# shared expert's w1|w3 (288 16-row tiles on 132 one-per-SM blocks: 24 blocks take 3 tiles) ends unevenly. Zero-code
# A/Bs of the branch grid's spare SMs (StreamGrid::spare_sms; 36 spare = 96 blocks = exactly 3 tiles each), and the
# MXFP4 stamps at the default and at 36 spare SMs.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session28_call2.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='ab_spare_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_SPARE_SMS "0 36 52 68" 2 --family v41;
ab_spare_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_SPARE_SMS "0 36" 2;
stamps_v41|timeout 150 $b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out $OUT/fp4_stamps_v41.json > $OUT/fp4_stamps_v41.log 2>&1 || true && grep -E "^ *(all|alone) " $OUT/fp4_stamps_v41.log | cut -c1-200;
stamps_v41_spare36|DEEPINFER_BRANCH_GEMV_SPARE_SMS=36 timeout 150 $b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out $OUT/fp4_stamps_v41_spare36.json > $OUT/fp4_stamps_v41_spare36.log 2>&1 || true && grep -E "^ *(all|alone) " $OUT/fp4_stamps_v41_spare36.log | cut -c1-200'
exec bash "$(dirname "$0")/../device_call.sh"
