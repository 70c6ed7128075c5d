#!/usr/bin/env bash
# Third device call of session 19 (binaries of the index-query `first` commit): where the indexer's query and the
# attention's wq_b go, with the compressors on their branch (run 110: DEEPINFER_COMPRESSOR_BRANCH=1 batch 1 -1.6 % V4
# / -1.1 % V4.1, with the query branch -3.0 / -1.4 %), then the query norm prologue with the branches on, their step
# tests and one traced batch-1 step. ~300 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session19_call3.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='branch_tests_tail|timeout 200 $b/test_gpu_model --gtest_filter=GpuIndexQueryFirst.*:GpuCompressorBranch.*:GpuIndexQueryBranch.*:GpuQNormPrologue.* > $OUT/branch_tests.log 2>&1 || grep -B3 -A8 Failure $OUT/branch_tests.log | head -40 && grep -E "^\[ +(OK|FAILED|PASSED) " $OUT/branch_tests.log;
ab_place|DEEPINFER_COMPRESSOR_BRANCH=1 OUT=$OUT/place bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_INDEX_QUERY "before_join branch first" 2;
ab_comp|OUT=$OUT/comp bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_COMPRESSOR_BRANCH "0 1" 2;
ab_place_v41|DEEPINFER_COMPRESSOR_BRANCH=1 OUT=$OUT/place41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_INDEX_QUERY "before_join branch first" 2 --family v41;
ab_comp_v41|OUT=$OUT/comp41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_COMPRESSOR_BRANCH "0 1" 2 --family v41;
ab_qnorm_branches|DEEPINFER_COMPRESSOR_BRANCH=1 DEEPINFER_INDEX_QUERY=first OUT=$OUT/qn bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_Q_NORM_PROLOGUE "0 1" 2;
trace_first_tail|DEEPINFER_INDEX_QUERY=first DEEPINFER_COMPRESSOR_BRANCH=1 OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true && head -3 $OUT/trace/trace_b1.txt'
exec bash "$(dirname "$0")/../device_call.sh"
