#!/usr/bin/env bash
# Session 37, seventh call: batch-invariant mode's dense FP8 GEMMs through the mid kernels (fp8_gemm.h
# batch_invariant_fp8, DEEPINFER_BATCH_INVARIANT_FP8=wgmma|mid|split, default wgmma). Run 203's profile: in the mode
# the wgmma tile kernel takes 35 us a launch at batch 1 against the decode stream's 11.
# 1. test_gpu's GpuBatchInvariance.* (the new packed case: each choice, a row alone = the row in a 300-row call,
#    and against the CPU); the model-level batch-invariant tests (the engine's 200 mixed requests and chunked
#    prefill each alone vs in the batch, V4.1's compressor projections, the MoE's and the fused attention's) under
#    mid and under split.
# 2. The cost of the mode per choice: v4_decode --batch-invariant with each value, both models, 2 repeats; the
#    default mode once per model in the same call for the ratio.
#   usage (GPU machine, repo root; .gpubin: test_gpu, test_gpu_model, v4_decode): bash tools/gpu/calls/session37_call7.sh
set -uo pipefail
export SKIP_SUITES=1
bi_model_tests="GpuEngine.BatchInvariant*:GpuV41Modules.Csa2Compressor*:GpuMoe.*BatchInvariant*:GpuDecodeFused.AttentionBatchInvariant"
export EXTRA_GPU0="bi_tests|\$b/test_gpu --gtest_filter='GpuBatchInvariance.*';
bi_model_mid|DEEPINFER_BATCH_INVARIANT_FP8=mid \$b/test_gpu_model --gtest_filter='$bi_model_tests';
bi_model_split|DEEPINFER_BATCH_INVARIANT_FP8=split \$b/test_gpu_model --gtest_filter='$bi_model_tests';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_BATCH_INVARIANT_FP8 'wgmma mid split' 2 --batch-invariant;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_BATCH_INVARIANT_FP8 'wgmma mid split' 2 --family v41 --batch-invariant;
default_v4|OUT=\$OUT/default_v4 bash tools/gpu/decode_switch_ab.sh \$b FLAG none 1;
default_v41|OUT=\$OUT/default_v41 bash tools/gpu/decode_switch_ab.sh \$b FLAG none 1 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
