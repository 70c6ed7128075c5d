#!/usr/bin/env bash
# Fourth device call of session 21 (binaries of the MXFP4 stream's 34 KB stages, plus v4_decode_old: the same tree
# with 17 KB stages):
#   - the MXFP4 stream's kernel and MoE tests (GpuStreamFp4Wgmma.*, GpuMxfp4Experts.*, GpuMoe.*);
#   - same-call A/B of the two builds (V4 three alternations, V4.1 two);
#   - roofline --fp4-phases with the new stages (against runs 122-123);
#   - one traced batch-1 V4 step.
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session21_call4.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='fp4_tests_tail|timeout 280 $b/test_gpu --gtest_filter=GpuStreamFp4Wgmma.*:GpuMxfp4Experts.*:StreamFp4Wgmma.* > $OUT/fp4_tests.log 2>&1 && timeout 250 $b/test_gpu_model --gtest_filter=GpuMoe.* >> $OUT/fp4_tests.log 2>&1 || grep -B3 -A8 Failure $OUT/fp4_tests.log | head -40 && grep -E "^\[ +(OK|FAILED|PASSED) " $OUT/fp4_tests.log && grep -E "GPU_CHECK.*mismatches=[1-9]" $OUT/fp4_tests.log | head;
ab_stage|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_old v4_decode" 3;
ab_stage_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_old v4_decode" 2 --family v41;
phases_tail|timeout 200 $b/roofline --fp4-phases --out $OUT/fp4_phases.json > $OUT/fp4_phases.log 2>&1 || true && grep plain $OUT/fp4_phases.log | cut -c1-700;
trace_tail|OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true && head -14 $OUT/trace/trace_b1.txt'
exec bash "$(dirname "$0")/../device_call.sh"
