#!/usr/bin/env bash
# Session 37, last call: the binaries of the session's last code, batch_invariant_fp8 = Auto as the default (no
# environment): GpuBatchInvariance.*, the model-level batch-invariant tests, and the opt-in mid paths outside the
# mode (GpuFp8Gemm.Mid*: launch_mid_form is now shared by both dispatches).
#   usage (GPU machine, repo root; .gpubin: test_gpu, test_gpu_model): bash tools/gpu/calls/session37_call10.sh
set -uo pipefail
export SKIP_SUITES=1
bi_model_tests="GpuEngine.BatchInvariant*:GpuV41Modules.Csa2Compressor*:GpuMoe.*BatchInvariant*:GpuDecodeFused.AttentionBatchInvariant"
export EXTRA_GPU0="bi_tests|\$b/test_gpu --gtest_filter='GpuBatchInvariance.*:GpuFp8Gemm.Mid*';
bi_model_default|\$b/test_gpu_model --gtest_filter='$bi_model_tests'"
exec bash "$(dirname "$0")/../device_call.sh"
