#!/usr/bin/env bash
# Session 30, fifth call (test_gpu_model + v4_decode of an experiment build on abfa93c, not committed:
# DEEPINFER_RING_FENCE 0 = the consumer warps' fence before each release (the fix, default), 2 = none, 3 = the fence,
# with the FP8 wgmma stream's weight-scale loads issued after the release instead of before the full-barrier wait, so
# that the fence (MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S) has no global load to wait for):
# - the race's test 8 times under 3 and under 2 (does this build show the race without the fence?);
# - decode A/B of 0 / 3 / 2 on both models (run 169: the fence +1.2-1.4 % at batch 1, +3.6-3.8 % at batch 8).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session30_call5.sh
set -uo pipefail
t='$b/test_gpu_model --gtest_filter=GpuMoe.DecodeV8InvariantRunToRunFullWidth --gtest_repeat=8'
export SKIP_SUITES=1 EXTRA_GPU0="race_scales_after|DEEPINFER_RING_FENCE=3 timeout 100 $t > \$OUT/race_scales_after.log 2>&1 || true && echo failed_iterations=\$(grep -c 'FAILED  ] GpuMoe.*ms)' \$OUT/race_scales_after.log);
race_none|DEEPINFER_RING_FENCE=2 timeout 100 $t > \$OUT/race_none.log 2>&1 || true && echo failed_iterations=\$(grep -c 'FAILED  ] GpuMoe.*ms)' \$OUT/race_none.log);
ab_v4|OUT=\$OUT/v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_RING_FENCE '0 3 2' 2;
ab_v41|OUT=\$OUT/v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_RING_FENCE '0 3 2' 2 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
