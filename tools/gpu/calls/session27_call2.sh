#!/usr/bin/env bash
# Second device call of session 27 (binaries of main 56ceba8 + the MoE's kept counters, DEEPINFER_MOE_COUNTERS=
# kept|zeroed, default kept; the fused routing's gate rows loaded before its PDL wait, DEEPINFER_ROUTE_GATE=early|late,
# default early):
#   - bitwise: GpuMoe.KeptCountersSameBits, GpuMoeCounters.* (model steps), GpuMoe.RouteGateEarlySameBits,
#     GpuMoe.RouteGateEarlyFullWidth (hidden 4096 / 5120: rows alone vs in a batch, early vs late), GpuRouteGate.*,
#     the GpuMoe tests against the CPU, launch counts, stamps and graphs, the forward suites against the CPU;
#   - same-call A/Bs of both switches, V4 (16 layers, 4K) and V4.1 (10 layers);
#   - the routing's in-step phases (v4_decode --route-stamps), gate early vs late.
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session27_call2.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='new_tests_tail|timeout 290 $b/test_gpu_model --gtest_filter="GpuMoe.KeptCountersSameBits:GpuMoeCounters.*:GpuMoe.RouteGateEarly*:GpuRouteGate.*:GpuMoe.RouteDispatchWarpSameBits:GpuMoe.RouteStampsSameBits:GpuMoe.BiasedLayerMatchesCpu:GpuMoe.HashLayerMatchesCpu:GpuMoe.FusedDecodeMatchesCpu:GpuMoe.GraphCaptureReplays:GpuMoe.DecodeLaunchCount:GpuMoe.DecodeV9*:GpuMoe.FullWidthSmoke:V4GpuForward.*:V41GpuForward.*" > $OUT/new_model_tests.log 2>&1 || true && grep -chE "mismatches=[1-9]" $OUT/new_model_tests.log || true && grep -hE "^\[  (PASSED|FAILED) |FAILED|OK \] .* ms" $OUT/new_model_tests.log | head -60;
ab_counters|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_COUNTERS "zeroed kept" 3;
ab_counters_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_COUNTERS "zeroed kept" 3 --family v41;
ab_gate|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_ROUTE_GATE "late early" 3;
ab_gate_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_ROUTE_GATE "late early" 3 --family v41;
route_tail|timeout 100 $b/v4_decode --route-stamps --out $OUT/route_early.json > $OUT/route_early.log 2>&1 || true && DEEPINFER_ROUTE_GATE=late timeout 100 $b/v4_decode --route-stamps --out $OUT/route_late.json > $OUT/route_late.log 2>&1 || true && grep -A1 "^  all" $OUT/route_early.log | head -3 && grep -A1 "^  all" $OUT/route_late.log | head -3'
exec bash "$(dirname "$0")/../device_call.sh"
