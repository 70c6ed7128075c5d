#!/usr/bin/env bash
# Second device call of session 18 (binaries of 93bece0): the first run of three compiled changes, each behind a
# switch: prefill v12 (DEEPINFER_PREFILL_KERNEL=v12: its GpuMoePrefillGemm checks, then its roofline rows at 4096 /
# 16384 tokens beside v9), V4.1's query RoPE in wq_b's epilogue (DEEPINFER_Q_ROPE_EPILOGUE: kernel and step tests,
# then the same-call A/B on 10 V4.1-Flash layers) and the decode select's score shape (DEEPINFER_INDEX_SCORE_SHAPE:
# the decode-select cases and the step test, the latency bench per shape, then the A/B on 16 V4-Flash layers).
# No suites (the session's last call runs them). ~500 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session18_call2.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='prefill_tests_tail|timeout 150 $b/test_gpu --gtest_filter=GpuMoePrefillGemm.* 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED) |Failure|rel|mismatch" | grep -v "mismatches=0" | tail -40;
prefill_tail|timeout 200 $b/roofline --prefill-only --prefill-16k --quick --out $OUT/prefill_v12.json > $OUT/prefill_v12.log 2>&1 && grep -E "^copy|^roofline|mxfp4_prefill_v9 |mxfp4_prefill_v12|\(v9\)|\(v12" $OUT/prefill_v12.log;
new_tests_tail|timeout 120 $b/test_gpu --gtest_filter=GpuFp8Gemm.RopeEpilogueBitwise 2>&1 | tail -4 && timeout 200 $b/test_gpu_model --gtest_filter=GpuQRopeEpilogue.*:GpuDecodeFused.Indexer*:GpuIndexScoreShape.* 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED) |Failure" | tail -20;
index_select_tail|timeout 120 $b/index_select_latency --entries 1024,2048,16384 --out $OUT/index_score_shape.json 2>&1 | tail -30;
ab_qrope_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_Q_ROPE_EPILOGUE "0 1" 2 --family v41;
ab_index_shape|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_INDEX_SCORE_SHAPE "64x2 32x1" 2'
exec bash "$(dirname "$0")/../device_call.sh"
