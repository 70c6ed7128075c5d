#!/usr/bin/env bash
# Session 9, final call (two H200s, binaries of HEAD): every gpu suite with the session's defaults (MXFP4 decode stream
# on wgmma, mHC site tail spread, prefill v8), then H73's FP8 decode stream on wgmma (DEEPINFER_STREAM_FP8=wgmma: the
# suites it reaches, its kernel tests, a same-call A/B) over both GPUs, both families' benchmark tables
# (v4_decode --chunk 2048 --pdl on) and the full roofline benchmark on GPU 1.
#   usage (GPU machine, repo root, the seven binaries in .gpubin): bash tools/gpu/calls/session9_callB.sh
export EXTRA_GPU0='fp8wg_model|DEEPINFER_STREAM_FP8=wgmma $b/test_gpu_model --gtest_filter="GpuMoe*:V4GpuForward*";
fp8wg_gemm|DEEPINFER_STREAM_FP8=wgmma $b/test_gpu --gtest_filter="GpuFp8Gemm.*:GpuStreamFp8Wgmma.*:GpuBatchInvariance.*";
fp8wg_ab|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_FP8 "default wgmma" 2'
export EXTRA_GPU1='fp8wg_v41|DEEPINFER_STREAM_FP8=wgmma $b/test_gpu_model --gtest_filter="GpuDecodeFused*:V41GpuForward*";
tables_v4_tail|$b/v4_decode --chunk 2048 --pdl on --out $OUT/v4_decode_full_v4.json;
tables_v41_tail|$b/v4_decode --family v41 --chunk 2048 --pdl on --out $OUT/v4_decode_full_v41.json;
roofline_full|$b/roofline --out $OUT/roofline_full.json'
exec bash "$(dirname "$0")/../device_call.sh"
