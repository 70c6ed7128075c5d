#!/usr/bin/env bash
# Session 41, second call (written in session 41, which was lent no machine; compiled, not run).
#  - The bf16 vector type made trivially copyable (dev::Bf16x8 as four words: every Bf16x8 load / store one 16-byte
#    access instead of four 4-byte ones; the mHC sites, the norms, the routing, wo_a's W8A16 GEMV and wo_b's prologue
#    lose 2-12 % of their instructions, the same values): the kernels' tests, the forward tests, then the step A/B
#    against the build before it (v4_decode_base: 8b45ff1, in .gpubin through EXTRA_BINS) on both models, and both
#    builds' batch-1 timelines (per-kernel times: which kernels gained).
#   usage (GPU machine, repo root; .gpubin: test_gpu, test_gpu_model, v4_decode and v4_decode_base, packed with
#   EXTRA_BINS=build-base-bin/v4_decode_base): bash tools/gpu/calls/session41_call2.sh (~6 min)
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="tests_b16|\$b/test_gpu --gtest_filter='GpuRmsNorm.*:GpuMhc.*:GpuW8A16.*:GpuRouter.*:GpuFp8Quantize.*:GpuHcSiteSpread.*:GpuHcLaggedSite.*:GpuHcMixMma.*:GpuBf16Gemv.*';
tests_b16_model|\$b/test_gpu_model --gtest_filter='GpuQuantPrologue.*:GpuRoute*:GpuSiteMixBranch.*:GpuV41SiteEntry.*:GpuMoeSiteCombine.*:GpuIndexScoreShape.*:GpuCsa2ScoreShape.*:V4GpuForward.*:V41GpuForward.*:GpuPdlModel.*';
ab_b16_v4|OUT=\$OUT/ab_b16_v4 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_base v4_decode' 4;
ab_b16_v41|OUT=\$OUT/ab_b16_v41 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_base v4_decode' 3 --family v41;
trace_new|OUT=\$OUT/trace_new bash tools/gpu/trace_decode.sh 1 16;
trace_base|mkdir -p /tmp/bb && cp \$b/v4_decode_base /tmp/bb/v4_decode && b=/tmp/bb OUT=\$OUT/trace_base bash tools/gpu/trace_decode.sh 1 16"
exec bash "$(dirname "$0")/../device_call.sh"
