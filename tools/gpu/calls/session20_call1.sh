#!/usr/bin/env bash
# First device call of session 20 (binaries of 498976f, every session-19 default): the two experiments session 19
# built but could not run, and the standing batch-1 decode rows beside them.
#   - helper-107: does a page-touch pass over a model-sized buffer (and an L2 stream) before each decode select
#     reproduce the select's in-step time (20.7 us in run 113's trace against 12.9 alone)?
#     `index_select_latency --cold 64` at 1024 / 2048 / 16384 entries, then 4 KB-stride and 256 MB-stream variants.
#   - helper-108: wq_b's grid on the query branch (`DEEPINFER_BRANCH_GEMV_SPARE_SMS`, `_BLOCKS_PER_SM`): its bitwise
#     tests, then same-call A/Bs on the whole-model decode benchmark (V4 and V4.1).
#   - one traced batch-1 V4 step at the defaults (the timeline the A/Bs are read against).
# No suites (the session's last call runs them). ~300 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session20_call1.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='grid_tests_tail|timeout 200 $b/test_gpu --gtest_filter=GpuFp8Gemm.StreamGridCapBitwise > $OUT/grid_tests.log 2>&1 && timeout 200 $b/test_gpu_model --gtest_filter=GpuBranchGemvGrid.* >> $OUT/grid_tests.log 2>&1 || grep -B3 -A8 Failure $OUT/grid_tests.log | head -40 && grep -E "^\[ +(OK|FAILED|PASSED) " $OUT/grid_tests.log && grep -E "GPU_CHECK" $OUT/grid_tests.log | grep -vc "mismatches=0/";
cold_select_tail|timeout 150 $b/index_select_latency --entries 1024,2048,16384 --cold 64 --out $OUT/cold_select.json > $OUT/cold_select.log 2>&1 || true && grep -E "per call|score_to|cold" $OUT/cold_select.log | head -40;
cold_variants_tail|timeout 100 $b/index_select_latency --entries 1024 --cold 64 --cold-stride 4 --out $OUT/cold_stride4k.json > $OUT/cold_stride4k.log 2>&1 && timeout 100 $b/index_select_latency --entries 1024 --cold 64 --cold-stream 256 --out $OUT/cold_stream.json > $OUT/cold_stream.log 2>&1 || true && grep -hE "_cold|cold_us" $OUT/cold_stride4k.log $OUT/cold_stream.log | head -20;
trace_tail|OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true && head -3 $OUT/trace/trace_b1.txt;
ab_spare_sms|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_SPARE_SMS "0 8 16" 2;
ab_spare_sms_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_SPARE_SMS "0 8 16" 2 --family v41;
ab_blocks_per_sm|OUT=$OUT/v4b bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM "0 1" 2'
exec bash "$(dirname "$0")/../device_call.sh"
