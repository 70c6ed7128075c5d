#!/usr/bin/env bash
# Session 37, ninth call: batch_invariant_fp8's Auto (fp8_gemm.h: the mid kernel for weights with n <= 2048, the
# wgmma tile kernel above, by shape alone). Run 205 per launch in the mode (V4, ncu): wkv / wq_a 32 us on wgmma vs
# 10 on mid at batch 1, 34 vs 43 / 67 at 256; the wide weights lose on mid at 256 (49 -> 370 us).
# 1. GpuBatchInvariance.* (each choice, Auto's wide case on wgmma) and the model-level batch-invariant tests under
#    auto.
# 2. v4_decode --batch-invariant with wgmma / auto / mid, both models, 2 repeats; the default mode once per model.
#   usage (GPU machine, repo root; .gpubin: test_gpu, test_gpu_model, v4_decode): bash tools/gpu/calls/session37_call9.sh
set -uo pipefail
export SKIP_SUITES=1
bi_model_tests="GpuEngine.BatchInvariant*:GpuV41Modules.Csa2Compressor*:GpuMoe.*BatchInvariant*:GpuDecodeFused.AttentionBatchInvariant"
export EXTRA_GPU0="bi_tests|\$b/test_gpu --gtest_filter='GpuBatchInvariance.*';
bi_model_auto|DEEPINFER_BATCH_INVARIANT_FP8=auto \$b/test_gpu_model --gtest_filter='$bi_model_tests';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_BATCH_INVARIANT_FP8 'wgmma auto mid' 2 --batch-invariant;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_BATCH_INVARIANT_FP8 'wgmma auto mid' 2 --family v41 --batch-invariant;
default_v4|OUT=\$OUT/default_v4 bash tools/gpu/decode_switch_ab.sh \$b FLAG none 1;
default_v41|OUT=\$OUT/default_v41 bash tools/gpu/decode_switch_ab.sh \$b FLAG none 1 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
