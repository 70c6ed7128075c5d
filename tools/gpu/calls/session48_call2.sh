#!/usr/bin/env bash
# Session 48: helper-129's second SASS audit (the compressors' save / entry kernels, the key lists' index kernels,
# add_ape, rms_norm_f32_quantize, fp8_quantize: dependent round trips and runtime divisions off their batch-1 paths;
# NOTES "Session 48") against the tree without it.
#   .gpubin/bins.tar.xz (one xz pack, 192 MiB dictionary): v4_decode (the base: HEAD without the audit),
#   v4_decode_audit2, test_gpu and test_gpu_model (both with it), all stripped.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session48_call2.sh   (~3.5 min)
#   QUICK=1: the tests and the A/B at batch 1, 2 repeats (~1.5 min).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
tests="tests_kernels|\$b/test_gpu --gtest_filter='GpuRmsNorm.*:GpuFp8Quantize.*:GpuKvLists.*:GpuKvRecord*:GpuSinkAttention.*';
tests_model|\$b/test_gpu_model --gtest_filter='GpuCompressorIndexer.*:GpuV41Modules.*:V4GpuForward.*:V41GpuForward.*'"
export EXTRA_GPU0="$tests;
$(bin_ab_models ab_audit2 "v4_decode v4_decode_audit2")"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
