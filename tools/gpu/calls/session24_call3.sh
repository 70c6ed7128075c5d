#!/usr/bin/env bash
# Third device call of session 24 (binaries of 4f2ae95: the MoE combine read by the next mHC site,
# DEEPINFER_MOE_SITE_COMBINE, default off; the attention merge's batched loads; plus v4_decode of 4f2ae95 with
# sink_attention.cu's merge as before, as v4_decode_nomerge):
#   - the new tests (GpuHcSiteSpread.* with CombinePartsMatchCombinedYBitwise, GpuMoeSiteCombine.*), and the V4
#     forward suite against the CPU with the switch on;
#   - same-call A/B of DEEPINFER_MOE_SITE_COMBINE=0|1 on V4 (16 layers, 4K), 3 alternations; V4.1 (no change
#     expected: its sites take no parts) once each;
#   - the merge: BIN A/B v4_decode_nomerge | v4_decode with the site combine off in both, V4 and V4.1, 3 / 2
#     alternations; the attention tests (CPU comparisons, the fused / epilogue / prologue forms bitwise).
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session24_call3.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='new_tests|timeout 300 $b/test_gpu --gtest_filter="GpuHcSiteSpread.*:GpuSinkAttention.*:GpuKvRecord*:GpuBatchInvariance.Sink*" > $OUT/new_tests.log 2>&1 || true && timeout 300 $b/test_gpu_model --gtest_filter="GpuMoeSiteCombine.*:GpuDecodeFused.Attention*:GpuMergeEpilogue.*" >> $OUT/new_tests.log 2>&1 || true && grep -cE "mismatches=[1-9]" $OUT/new_tests.log || true && grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/new_tests.log | head;
v4_forward_on|DEEPINFER_MOE_SITE_COMBINE=1 timeout 300 $b/test_gpu_model --gtest_filter="V4GpuForward.*:GpuMoe*" > $OUT/v4_forward_on.log 2>&1 || true && grep -cE "mismatches=[1-9]" $OUT/v4_forward_on.log || true && grep -E "^\[  (PASSED|FAILED) |FAILED" $OUT/v4_forward_on.log | head;
ab_site_combine|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_SITE_COMBINE "0 1" 3;
ab_site_combine_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_SITE_COMBINE "0 1" 1 --family v41;
ab_merge|DEEPINFER_MOE_SITE_COMBINE=0 OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_nomerge v4_decode" 3;
ab_merge_v41|DEEPINFER_MOE_SITE_COMBINE=0 OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_nomerge v4_decode" 2 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
