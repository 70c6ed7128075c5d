#!/usr/bin/env bash
# Fourth device call of session 27 (binaries of main: V4.1's site combine behind its own switch,
# DEEPINFER_V41_SITE_COMBINE=1, default off after run 153's loss; GpuMoe.RouteGateEarlyFullWidth comparing the routing):
#   - the tests run 153's model_b did not reach before its 300 s cap (V41GpuForward.BoundedReplay..., GpuV41Modules.*,
#     GpuV41SiteEntry.*), GpuMoe.RouteGateEarlyFullWidth, GpuMoeSiteCombine.*;
#   - the A/B of the V4.1 switch (the standing V4.1 numbers at the defaults).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session27_call4.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='new_tests_tail|timeout 280 $b/test_gpu_model --gtest_filter="V41GpuForward.BoundedReplay*:GpuV41Modules.*:GpuV41SiteEntry.*:GpuMoe.RouteGateEarlyFullWidth:GpuMoeSiteCombine.*" > $OUT/new_model_tests.log 2>&1 || true && grep -chE "mismatches=[1-9]" $OUT/new_model_tests.log || true && grep -hE "^\[  (PASSED|FAILED) |FAILED|OK \] .* ms" $OUT/new_model_tests.log | head -30;
ab_v41_site_combine|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_V41_SITE_COMBINE "0 1" 2 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
