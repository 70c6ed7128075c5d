#!/usr/bin/env bash
# Session 9, first call (two H200s): tools/gpu/calls/session8_final.sh (every gpu test binary of HEAD) with session 8's
# switches' correctness steps: the MXFP4 decode stream on wgmma (DEEPINFER_STREAM_FP4=wgmma), the mHC site tail
# spread (DEEPINFER_HC_SITE_TAIL=spread) and the packed FP8 KV record (DEEPINFER_KV_FORMAT=fp8) through the suites
# they reach.
#   usage (GPU machine, repo root, prebuilt binaries in .gpubin): bash tools/gpu/calls/session9_call1.sh
b=/tmp/deepinfer-bin
export EXTRA_GPU0="wgmma_experts|DEEPINFER_STREAM_FP4=wgmma $b/test_gpu --gtest_filter='GpuMxfp4Experts.*';\
wgmma_model|DEEPINFER_STREAM_FP4=wgmma $b/test_gpu_model --gtest_filter='GpuMoe*:V4GpuForward*';\
spread_mhc|DEEPINFER_HC_SITE_TAIL=spread $b/test_gpu --gtest_filter='GpuMhc.*:GpuPdl.*'"
export EXTRA_GPU1="kvfp8_model|DEEPINFER_KV_FORMAT=fp8 $b/test_gpu_model --gtest_filter='V4GpuForward.*:GpuDecodeFused.*';\
kvfp8_cp|DEEPINFER_KV_FORMAT=fp8 CUDA_VISIBLE_DEVICES=0,1 $b/test_gpu_ep --gtest_filter='CpModel.*'"
exec bash "$(dirname "$0")/session8_final.sh"
