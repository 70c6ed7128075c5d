#!/usr/bin/env bash
# Third device call of session 18 (binaries of ef64126, as call 2): why GpuFp8Gemm.RopeEpilogueBitwise failed in
# call 2 (its failure lines), and why prefill v12 came out x0.92 of v9 (run 103): ncu's per-instruction stall samples
# of one v12 and one v9 launch at V4 w13, 16384 tokens (the first launch of each kernel in `roofline --prefill-16k`).
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session18_call3.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='rope_test_tail|timeout 120 $b/test_gpu --gtest_filter=GpuFp8Gemm.RopeEpilogueBitwise > $OUT/rope_test.log 2>&1 || grep -B3 -A8 "Failure" $OUT/rope_test.log | head -60 && grep -E "GPU_CHECK fp8_gemm_rope" $OUT/rope_test.log | grep -vE "mismatches=0|off=2 on=1" | head -20;
ncu_v12_tail|bash tools/gpu/ncu_sass_stalls.sh v12 mxfp4_prefill_v12_kernel 0 -- $b/roofline --prefill-only --prefill-16k --quick --out $OUT/x12.json && tail -45 $OUT/ncu_sass_v12.txt;
ncu_v9_tail|bash tools/gpu/ncu_sass_stalls.sh v9 mxfp4_prefill_v9_kernel 0 -- $b/roofline --prefill-only --prefill-16k --quick --out $OUT/x9.json && tail -45 $OUT/ncu_sass_v9.txt'
exec bash "$(dirname "$0")/../device_call.sh"
