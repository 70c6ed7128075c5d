#!/usr/bin/env bash
# Session 29, fifth call (test_gpu_model only, the session's code plus GpuMoe.DecodeV8InvariantRunToRunFullWidth):
# is V8 in batch-invariant mode at 256 rows run-to-run bitwise, with the side stream offered and without (run 161:
# its first graph differed from a second in one item of the shared expert's w2)? Then DecodeV9WideFullWidth 4 times.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session29_call5.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='v8_rtr|timeout 200 $b/test_gpu_model --gtest_filter=GpuMoe.DecodeV8InvariantRunToRunFullWidth --gtest_repeat=3 > $OUT/v8_rtr.log 2>&1 || echo "rc=$?" && grep -hE "GPU_CHECK|differs in|^\[  (PASSED|FAILED) " $OUT/v8_rtr.log | head -60;
v9wide|timeout 150 $b/test_gpu_model --gtest_filter=GpuMoe.DecodeV9WideFullWidth --gtest_repeat=4 > $OUT/v9wide.log 2>&1 || echo "rc=$?" && grep -hE "mismatches=[1-9]|differs in|^\[  (PASSED|FAILED) " $OUT/v9wide.log | head -30'
exec bash "$(dirname "$0")/../device_call.sh"
