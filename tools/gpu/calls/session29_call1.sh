#!/usr/bin/env bash
# Session 29, first call (binaries of 4f2fb2b = session 28's last code): the timing half of session28_call4.sh, split
# off because a call near the 600 s cap loses everything when the machine is taken back (session 28).
# - The MXFP4 stream's leftover items on the first blocks (DEEPINFER_FP4_ITEMS=front, default even; NOTES "Session
#   28"): A/Bs on both models, V4.1's in-step stamps in both forms.
# - The dense streams' balanced grid against the full one (DEEPINFER_STREAM_GRID), both models; V4.1's branch-GEMV
#   blocks per SM (its default 2 against 1).
# - The L2 prefetch of the next dense GEMVs' weights (DEEPINFER_L2_PREFETCH, default off since run 40, +3.1 % then at a
#   3.78 ms step): re-measured at today's 2.3 ms step, all four fork points and each alone.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session29_call1.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='ab_items_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_ITEMS "even front" 3 --family v41;
ab_items_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP4_ITEMS "even front" 3;
stamps_even_v41|DEEPINFER_FP4_ITEMS=even timeout 150 $b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out $OUT/fp4_stamps_v41_even.json > $OUT/fp4_stamps_v41_even.log 2>&1 || true && grep -E "^ *all " $OUT/fp4_stamps_v41_even.log | cut -c1-200;
stamps_front_v41|DEEPINFER_FP4_ITEMS=front timeout 150 $b/v4_decode --quick --pdl on --family v41 --fp4-stamps --out $OUT/fp4_stamps_v41_front.json > $OUT/fp4_stamps_v41_front.log 2>&1 || true && grep -E "^ *all " $OUT/fp4_stamps_v41_front.log | cut -c1-200;
ab_l2pf_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_L2_PREFETCH "0 1" 2;
ab_l2pf_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_L2_PREFETCH "0 1" 2 --family v41;
ab_l2pts_v4|DEEPINFER_L2_PREFETCH=1 OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_L2_PREFETCH_POINTS "1 2 3 4" 1;
ab_l2pts_v41|DEEPINFER_L2_PREFETCH=1 OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_L2_PREFETCH_POINTS "1 2 3 4" 1 --family v41;
ab_grid_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_GRID "balanced full" 2 --family v41;
ab_grid_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_GRID "balanced full" 2;
ab_blocks_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM "2 1" 2 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
