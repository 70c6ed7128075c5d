#!/usr/bin/env bash
# Session 30, third call (binaries of the ring fix: every bulk-copy ring consumer that reads a stage with ld.shared
# fences (fence.proxy.async.shared::cta) before releasing it, cuda/mbarrier.cuh warp_release_stage; run 166 showed the
# race gone with the fence in an experiment build):
# - the race's test 8 times and GpuMoe.DecodeV9WideFullWidth 3 times (both failed in most runs before);
# - the whole-model decode, both models, 3 runs each (the fence's cost: the fraction of the copy roofline measured in
#   the same run, against session 29's 49.2-49.5 % (V4) and 50.2-50.8 % (V4.1));
# - the prefill rows (the prefill rings' releases fence too), v13 against cuBLASLt FP8 in the same run.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session30_call3.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='race|timeout 120 $b/test_gpu_model --gtest_filter=GpuMoe.DecodeV8InvariantRunToRunFullWidth --gtest_repeat=8 > $OUT/race.log 2>&1 || true && echo failed_iterations=$(grep -c "FAILED  ] GpuMoe.*ms)" $OUT/race.log) && grep -h "mismatches=[1-9]" $OUT/race.log | head -8;
v9wide|timeout 150 $b/test_gpu_model --gtest_filter=GpuMoe.DecodeV9WideFullWidth --gtest_repeat=3 > $OUT/v9wide.log 2>&1 || true && echo failed_iterations=$(grep -c "FAILED  ] GpuMoe.*ms)" $OUT/v9wide.log) && grep -h "mismatches=[1-9]" $OUT/v9wide.log | head -8;
decode_v4|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b FLAG "none" 3;
decode_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b FLAG "none" 3 --family v41;
prefill|timeout 200 $b/roofline --prefill-only --prefill-16k --quick --out $OUT/prefill.json > $OUT/prefill.log 2>&1 || true && grep -E "^roofline|of the dense" $OUT/prefill.log | head -40'
exec bash "$(dirname "$0")/../device_call.sh"
