#!/usr/bin/env bash
# First device call of session 19 (binaries of 7fa04a0 + the index-query test): the first run of two scheduling /
# shape switches, each with its bitwise step tests, then same-call A/Bs on the whole-model decode benchmark:
#   - DEEPINFER_INDEX_QUERY=branch: the indexer's query on its own stream beside wq_b (GpuIndexQueryBranch), with the
#     schedule-switch step tests whose sequence now reaches the indexers' selection (helper-105: 192 / 96 tokens);
#   - DEEPINFER_CSA2_SCORE_SHAPE=auto: V4.1's CSA2 decode select with V4's per-row score shape (A/B only: its tests
#     are not written yet).
# No suites (the session's last call runs them). ~350 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session19_call1.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='schedule_tests_tail|timeout 280 $b/test_gpu_model --gtest_filter=GpuPdlModel.*:GpuSiteMixBranch.*:GpuMergeEpilogue.*:GpuQuantPrologue.*:GpuQRopeEpilogue.*:GpuIndexScoreShape.*:GpuIndexQueryBranch.* > $OUT/schedule_tests.log 2>&1 || grep -B3 -A8 Failure $OUT/schedule_tests.log | head -40 && grep -E "^\[ +(OK|FAILED|PASSED) |sequence:" $OUT/schedule_tests.log && grep -E "GPU_CHECK" $OUT/schedule_tests.log | grep -vc "mismatches=0/";
ab_index_query|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_INDEX_QUERY "before_join branch" 2;
ab_index_query_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_INDEX_QUERY "before_join branch" 2 --family v41;
ab_csa2_shape_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_CSA2_SCORE_SHAPE "64x2 auto" 2 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
