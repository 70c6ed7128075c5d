#!/usr/bin/env bash
# First device call of session 26 (binaries of main + DEEPINFER_STREAM_EARLY, default unlimited):
#   - stream_probe (bench/gpu/stream_probe.cu): the activation under a flood, modes 0-4 (run 146 had 0-2);
#   - the bitwise tests of the early-flood limit (GpuFp8Gemm.StreamEntryTriggerChainBitwise with its orders, the
#     model steps GpuStreamEarlyStages.*, moe_pair's segment 0 through GpuMoe.DecodeV9* with the limit at 0);
#   - same-call A/Bs of DEEPINFER_STREAM_EARLY -1 (today) / 0 / 1, V4 (16 layers, 4K) and V4.1 (10 layers).
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session26_call1.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='probe_tail|timeout 200 $b/stream_probe --out $OUT/stream_probe.json > $OUT/stream_probe.log 2>&1 || true && tail -16 $OUT/stream_probe.log;
new_tests_tail|timeout 200 $b/test_gpu --gtest_filter="GpuFp8Gemm.StreamEntryTriggerChainBitwise" > $OUT/new_tests.log 2>&1 || true && timeout 250 $b/test_gpu_model --gtest_filter="GpuStreamEarlyStages.*" > $OUT/new_model_tests.log 2>&1 || true && DEEPINFER_STREAM_EARLY=0 timeout 250 $b/test_gpu_model --gtest_filter="GpuMoe.DecodeV9*" > $OUT/moe_v9_early0.log 2>&1 || true && cat $OUT/new_tests.log $OUT/new_model_tests.log $OUT/moe_v9_early0.log | grep -cE "mismatches=[1-9]" || true && cat $OUT/new_tests.log $OUT/new_model_tests.log $OUT/moe_v9_early0.log | grep -E "^\[  (PASSED|FAILED) |FAILED" | head -20;
ab_early|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_EARLY "-1 0 1" 3;
ab_early_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_EARLY "-1 0 1" 3 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
