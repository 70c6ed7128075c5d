#!/usr/bin/env bash
# Fourth device call of session 26 (binaries of main + the routing's scores in the logit blocks, their loads issued together as run 149 showed they must be,
# DEEPINFER_ROUTE_SCORES=blocks|tail, default blocks):
#   - bitwise: GpuMoe.RouteScoresInBlocksSameBits, the GpuMoe tests against the CPU, GpuRouteScores.* (model steps),
#     (the forward suites passed on the first form in run 149; only the load order changed since);
#   - same-call A/Bs of DEEPINFER_ROUTE_SCORES tail / blocks, V4 (16 layers, 4K) and V4.1 (10 layers);
#   - the routing's in-step phases (v4_decode --route-stamps), blocks vs tail.
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session26_call4.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='new_tests_tail|timeout 280 $b/test_gpu_model --gtest_filter="GpuMoe.RouteScoresInBlocksSameBits:GpuMoe.BiasedLayerMatchesCpu:GpuMoe.FusedDecodeMatchesCpu:GpuMoe.DecodeV9WideMatchesV8Bitwise:GpuRouteScores.*" > $OUT/new_model_tests.log 2>&1 || true && grep -cE "mismatches=[1-9]" $OUT/new_model_tests.log || true && grep -E "^\[  (PASSED|FAILED) |FAILED|OK \] .* ms" $OUT/new_model_tests.log | head -20;
ab_scores|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_ROUTE_SCORES "tail blocks" 2;
ab_scores_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_ROUTE_SCORES "tail blocks" 2 --family v41;
route_tail|timeout 100 $b/v4_decode --route-stamps --out $OUT/route_blocks.json > $OUT/route_blocks.log 2>&1 || true && DEEPINFER_ROUTE_SCORES=tail timeout 100 $b/v4_decode --route-stamps --out $OUT/route_tail.json > $OUT/route_tail.log 2>&1 || true && grep -A1 "^  all" $OUT/route_blocks.log | head -3 && grep -A1 "^  all" $OUT/route_tail.log | head -3'
exec bash "$(dirname "$0")/../device_call.sh"
