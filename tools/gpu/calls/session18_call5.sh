#!/usr/bin/env bash
# Fifth device call of session 18 (binaries of cb7d7df, PACK_ONLY="test_gpu_model index_select_latency v4_decode"):
# the first run of DEEPINFER_INDEX_SCORE_SHAPE=auto (per row on the device: 32-entry tiles where a row's tiles fit the
# 32x1 grid one a block, else the 64x2 split): the decode-select cases and the step test, the latency bench per shape,
# and the same-call A/B against the 64x2 default on 16 V4-Flash layers. ~200 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session18_call5.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='auto_tests_tail|timeout 240 $b/test_gpu_model --gtest_filter=GpuDecodeFused.Indexer*:GpuIndexScoreShape.* > $OUT/auto_tests.log 2>&1 || grep -B3 -A8 Failure $OUT/auto_tests.log | head -40 && grep -E "^\[ +(OK|FAILED|PASSED) " $OUT/auto_tests.log && grep -E "GPU_CHECK.*auto" $OUT/auto_tests.log | grep -vc "mismatches=0/";
index_select_tail|timeout 120 $b/index_select_latency --entries 1024,2048,16384 --out $OUT/index_score_auto.json 2>&1 | grep -E "^n =|bins|auto" | tail -30;
ab_index_auto|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_INDEX_SCORE_SHAPE "64x2 auto" 2'
exec bash "$(dirname "$0")/../device_call.sh"
