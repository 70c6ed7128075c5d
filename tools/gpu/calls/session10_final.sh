#!/usr/bin/env bash
# Session 10's last device calls (one H200; prebuilt binaries of the session's HEAD in .gpubin plus v4_decode_old of
# db9fa51, session 9's last commit), through tools/gpu/device_call.sh:
#   part A: test_gpu (all), the prefill roofline (v5 / v8 / v9 rows), the benchmark tables of V4-Flash and V4.1-Flash,
#           V4-Flash prefill in 8192-row chunks, and the same-call A/B of the two v4_decode builds;
#   part B: test_gpu_model (all).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session10_final.sh A|B
set -uo pipefail
export SKIP_SUITES=1
case "${1:-A}" in
A)
  export EXTRA_GPU0='gpu_tests|$b/test_gpu;
prefill_tail|$b/roofline --prefill-only --out $OUT/roofline_prefill.json > $OUT/roofline_prefill.log 2>&1 || echo roofline failed && grep -E "^ *mxfp4_prefill_v(5|8|9|9_halves) |cublaslt_fp8|dense FP8|v9 / v5|v9h / v5" $OUT/roofline_prefill.log | head -70;
tables_v4_tail|$b/v4_decode --chunk 2048 --pdl on --out $OUT/v4_decode_v4.json;
tables_v41_tail|$b/v4_decode --family v41 --chunk 2048 --pdl on --out $OUT/v4_decode_v41.json;
chunk8192_tail|$b/v4_decode --chunk 8192 --pdl on --out $OUT/v4_decode_v4_chunk8192.json;
stage_ab|bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_old v4_decode" 2'
  ;;
B)
  export EXTRA_GPU0='model_a|$b/test_gpu_model --gtest_filter="GpuEngine.*:V4GpuForward.*:GpuMoe.*";
model_b|$b/test_gpu_model --gtest_filter="-GpuEngine.*:V4GpuForward.*:GpuMoe.*"'
  ;;
esac
exec bash "$(dirname "$0")/../device_call.sh"
