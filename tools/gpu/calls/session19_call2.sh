#!/usr/bin/env bash
# Second device call of session 19 (binaries of a9de271): the first run of three compiled changes with their tests,
# then same-call A/Bs on the whole-model decode benchmark and one traced batch-1 step:
#   - DEEPINFER_COMPRESSOR_BRANCH=1 (the KV compressor on its own stream), alone and with DEEPINFER_INDEX_QUERY=branch
#     (run 109's timelines: the side branch is the critical path once the index query leaves the main stream);
#   - DEEPINFER_Q_NORM_PROLOGUE=1 (V4's query norm + RoPE in the attention split kernel, helper-104);
#   - DEEPINFER_CSA2_SCORE_SHAPE (helper-103's tests and the CSA2 rows of index_select_latency).
# No suites (the session's last call runs them). ~400 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session19_call2.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='kernel_tests_tail|timeout 250 $b/test_gpu --gtest_filter=GpuSinkAttention.*:GpuKvRecord.*:GpuKvRecordV41.*:GpuRmsNorm.*:GpuRope.*:GpuKvCache.*:GpuMhc.* > $OUT/kernel_tests.log 2>&1 || grep -B3 -A8 Failure $OUT/kernel_tests.log | head -40 && grep -E "^\[ +(FAILED|PASSED) |QueryNorm" $OUT/kernel_tests.log | head -20;
model_tests_tail|timeout 290 $b/test_gpu_model --gtest_filter=GpuCsa2SelectBins.*:GpuCsa2ScoreShape.*:GpuDecodeFused.Indexer*:GpuIndexScoreShape.*:GpuV41Modules.Csa2*:GpuCompressorBranch.*:GpuQNormPrologue.*:GpuIndexQueryBranch.* > $OUT/model_tests.log 2>&1 || grep -B3 -A8 Failure $OUT/model_tests.log | head -40 && grep -E "^\[ +(OK|FAILED|PASSED) |CSA2_SELECT_TIME" $OUT/model_tests.log | head -60;
index_select_tail|timeout 150 $b/index_select_latency --entries 1024,2048,4096,16384 --out $OUT/index_select.json > $OUT/index_select.log 2>&1 || tail -5 $OUT/index_select.log && grep -E "^n =|bins |bins_auto|csa2" $OUT/index_select.log | head -60;
ab_comp_branch|OUT=$OUT/cb bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_COMPRESSOR_BRANCH "0 1" 2;
ab_comp_query_branch|DEEPINFER_INDEX_QUERY=branch OUT=$OUT/cqb bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_COMPRESSOR_BRANCH "0 1" 2;
ab_comp_branch_v41|OUT=$OUT/cb41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_COMPRESSOR_BRANCH "0 1" 2 --family v41;
ab_comp_query_branch_v41|DEEPINFER_INDEX_QUERY=branch OUT=$OUT/cqb41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_COMPRESSOR_BRANCH "0 1" 2 --family v41;
ab_qnorm_prologue|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_Q_NORM_PROLOGUE "0 1" 2;
trace_branches_tail|DEEPINFER_INDEX_QUERY=branch DEEPINFER_COMPRESSOR_BRANCH=1 OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true && head -3 $OUT/trace/trace_b1.txt'
exec bash "$(dirname "$0")/../device_call.sh"
