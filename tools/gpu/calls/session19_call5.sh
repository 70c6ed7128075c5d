#!/usr/bin/env bash
# Last device call of session 19 (binaries of the batched-staging default; PACK_ONLY="test_gpu_model v4_decode
# roofline"): the model / step / indexer tests with every session-19 default in effect, then the standing decode rows
# (16 V4-Flash and 10 V4.1-Flash layers at 4K, batch 1-256), one traced batch-1 step and the prefill GEMM rows in
# the same call. ~250 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session19_call5.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='model_tests_tail|timeout 290 $b/test_gpu_model --gtest_filter=V4GpuForward.*:V41GpuForward.*:GpuPdlModel.*:GpuDecodeFused.Indexer*:GpuCsa2*:GpuIndexScoreShape.*:GpuCompressorBranch.*:GpuIndexQueryFirst.*:GpuQNormPrologue.*:GpuEngine.*:GpuCompressorIndexer.* > $OUT/model_tests.log 2>&1 || grep -B3 -A8 Failure $OUT/model_tests.log | head -40 && grep -E "^\[ +(FAILED|PASSED) " $OUT/model_tests.log && grep -c "mismatches=[1-9]" $OUT/model_tests.log;
v4_decode_tail|timeout 120 $b/v4_decode --quick --pdl on --out $OUT/v4_decode.json > $OUT/v4_decode.log 2>&1 || true && grep -E "copy|^4096" $OUT/v4_decode.log;
v41_decode_tail|timeout 120 $b/v4_decode --quick --pdl on --family v41 --out $OUT/v41_decode.json > $OUT/v41_decode.log 2>&1 || true && grep -E "copy|^4096" $OUT/v41_decode.log;
trace_tail|OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true && head -3 $OUT/trace/trace_b1.txt;
prefill_tail|timeout 120 $b/roofline --prefill-only --prefill-16k --quick --out $OUT/prefill.json > $OUT/prefill.log 2>&1 || true && grep -E "^copy|^roofline|mxfp4_prefill_v9 |\(v9\)" $OUT/prefill.log | head -12'
exec bash "$(dirname "$0")/../device_call.sh"
