#!/usr/bin/env bash
# Last device call of session 18 (binaries of 955a1c9: prefill v12 removed, the query RoPE epilogue on by default, the
# score shape switch at its 64x2 default, the quant tests filling on their stream): every one-GPU suite; the RoPE and
# quantization-prologue kernel tests repeated (run 104's failure); racecheck on one small decode-stream test with its
# summary and kernel names (run 102 cut them off).
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session18_call4.sh
set -uo pipefail
export EXTRA_GPU0='quant_repeat_tail|timeout 200 $b/test_gpu --gtest_filter=GpuFp8Gemm.RopeEpilogueBitwise:GpuFp8Gemm.QuantPrologueBitwise --gtest_repeat=3 > $OUT/quant_repeat.log 2>&1 || grep -B3 -A8 Failure $OUT/quant_repeat.log | head -40 && grep -cE "mismatches=0/" $OUT/quant_repeat.log && grep -E "^\[ +(OK|FAILED) " $OUT/quant_repeat.log | sort | uniq -c;
racecheck_stream_tail|timeout 200 compute-sanitizer --tool racecheck --print-limit 4 $b/test_gpu --gtest_filter=GpuFp8Gemm.StreamDecodeShapes > $OUT/racecheck_stream.log 2>&1 || true && head -40 $OUT/racecheck_stream.log && grep -E "SUMMARY|PASSED|FAILED" $OUT/racecheck_stream.log'
exec bash "$(dirname "$0")/../device_call.sh"
