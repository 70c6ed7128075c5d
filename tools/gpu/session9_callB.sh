#!/usr/bin/env bash
# Session 9, final call (two H200s, binaries of HEAD): every gpu suite with the session's defaults (MXFP4 decode stream
# on wgmma, mHC site tail spread, prefill v8), then: GPU 0 the full roofline benchmark, H73's FP8 decode stream on
# wgmma (DEEPINFER_STREAM_FP8=wgmma: suites it reaches + same-call A/B) and H74's prefill v9 (A/B against v8);
# GPU 1 both families' benchmark tables (v4_decode --chunk 2048 --pdl on) and the V4.1 KV pool formats A/B.
#   usage (GPU machine, repo root, the seven binaries in .gpubin): bash tools/gpu/session9_callB.sh
export EXTRA_GPU0='roofline_full|$b/roofline --out $OUT/roofline_full.json;
fp8wg_model|DEEPINFER_STREAM_FP8=wgmma $b/test_gpu_model --gtest_filter="GpuMoe*:V4GpuForward*:GpuDecodeFused*:V41GpuForward*";
fp8wg_ab|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_FP8 "default wgmma" 2;
prefill_ab|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_PREFILL_KERNEL "v8 v9" 2'
export EXTRA_GPU1='tables_v4_tail|$b/v4_decode --chunk 2048 --pdl on --out $OUT/v4_decode_full_v4.json;
tables_v41_tail|$b/v4_decode --family v41 --chunk 2048 --pdl on --out $OUT/v4_decode_full_v41.json;
v41_kv_tail|bash tools/gpu/kv_format_ab.sh $b v41 6 2'
exec bash "$(dirname "$0")/session9_final.sh"
