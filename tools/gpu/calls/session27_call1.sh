#!/usr/bin/env bash
# First device call of session 27 (binaries of main + the fused routing's dispatch on one warp at <= 32 pairs,
# DEEPINFER_ROUTE_DISPATCH=warp|block, default warp; the mHC spread site's PDL trigger at its blocks' exit,
# DEEPINFER_HC_SITE_TRIGGER=partials|end, default partials):
#   - bitwise: GpuMoe.RouteDispatchWarpSameBits (rows 1-16 at top-4), GpuRouteDispatch.* (model steps), the GpuMoe
#     tests against the CPU, the stamps and graph tests; GpuHcSiteSpread.* (the graph replay now with both triggers);
#   - same-call A/Bs of both switches, V4 (16 layers, 4K) and V4.1 (10 layers);
#   - the routing's in-step phases (v4_decode --route-stamps), warp vs block.
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session27_call1.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='new_tests_tail|timeout 280 $b/test_gpu_model --gtest_filter="GpuMoe.RouteDispatchWarpSameBits:GpuRouteDispatch.*:GpuMoe.RouteStampsSameBits:GpuMoe.BiasedLayerMatchesCpu:GpuMoe.HashLayerMatchesCpu:GpuMoe.FusedDecodeMatchesCpu:GpuMoe.GraphCaptureReplays:GpuMoe.DecodeV9WideMatchesV8Bitwise:GpuMoe.DecodeV9MatchesV8Bitwise" > $OUT/new_model_tests.log 2>&1 || true && timeout 200 $b/test_gpu --gtest_filter="GpuHcSiteSpread.*" > $OUT/site_tests.log 2>&1 || true && grep -chE "mismatches=[1-9]" $OUT/new_model_tests.log $OUT/site_tests.log || true && grep -hE "^\[  (PASSED|FAILED) |FAILED|OK \] .* ms" $OUT/new_model_tests.log $OUT/site_tests.log | head -30;
ab_dispatch|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_ROUTE_DISPATCH "block warp" 3;
ab_dispatch_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_ROUTE_DISPATCH "block warp" 3 --family v41;
ab_trigger|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_HC_SITE_TRIGGER "partials end" 2;
ab_trigger_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_HC_SITE_TRIGGER "partials end" 2 --family v41;
route_tail|timeout 100 $b/v4_decode --route-stamps --out $OUT/route_warp.json > $OUT/route_warp.log 2>&1 || true && DEEPINFER_ROUTE_DISPATCH=block timeout 100 $b/v4_decode --route-stamps --out $OUT/route_block.json > $OUT/route_block.log 2>&1 || true && grep -A1 "^  all" $OUT/route_warp.log | head -3 && grep -A1 "^  all" $OUT/route_block.log | head -3'
exec bash "$(dirname "$0")/../device_call.sh"
