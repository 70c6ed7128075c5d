#!/usr/bin/env bash
# Session 11's last device call (binaries of the compressor-pair commit): same-call A/B of the compressors' paired
# projections (DEEPINFER_GEMM_PAIR 0 vs 1) on V4-Flash and V4.1-Flash, then test_gpu and test_gpu_model (all).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session11_call5.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='ab_gemm_pair|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_GEMM_PAIR "0 1" 2;
ab_gemm_pair_v41|mkdir -p $OUT/v41 && OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_GEMM_PAIR "0 1" 2 --family v41;
gpu_tests|$b/test_gpu;
model_a|$b/test_gpu_model --gtest_filter="GpuEngine.*:V4GpuForward.*:GpuMoe.*";
model_b|$b/test_gpu_model --gtest_filter="-GpuEngine.*:V4GpuForward.*:GpuMoe.*"'
exec bash "$(dirname "$0")/../device_call.sh"
