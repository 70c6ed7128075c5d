#!/usr/bin/env bash
# Session 30, fourth call (test_gpu_model + v4_decode of an experiment build on abfa93c: DEEPINFER_RING_FENCE picks
# where the decode rings' proxy fence sits, 0 = each consumer warp before its release (the fix, the default), 1 = the
# producer thread after its empty-barrier wait instead, 2 = none; not committed):
# - the race's test 8 times with the producer-side fence, 4 times without any (it must fail there);
# - the fence's cost as a same-run A/B of the three forms on both models (batch 1 lost ~1.2-1.7 % across sessions).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session30_call4.sh
set -uo pipefail
t='$b/test_gpu_model --gtest_filter=GpuMoe.DecodeV8InvariantRunToRunFullWidth'
export SKIP_SUITES=1 EXTRA_GPU0="race_producer|DEEPINFER_RING_FENCE=1 timeout 100 $t --gtest_repeat=8 > \$OUT/race_producer.log 2>&1 || true && echo failed_iterations=\$(grep -c 'FAILED  ] GpuMoe.*ms)' \$OUT/race_producer.log);
race_none|DEEPINFER_RING_FENCE=2 timeout 60 $t --gtest_repeat=4 > \$OUT/race_none.log 2>&1 || true && echo failed_iterations=\$(grep -c 'FAILED  ] GpuMoe.*ms)' \$OUT/race_none.log);
ab_v4|OUT=\$OUT/v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_RING_FENCE '0 1 2' 2;
ab_v41|OUT=\$OUT/v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_RING_FENCE '0 1 2' 2 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
