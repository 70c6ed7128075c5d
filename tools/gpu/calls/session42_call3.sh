#!/usr/bin/env bash
# Session 42, fifth call: the defaults after run 222 (the attention core's split / merge with PDL on by default; the
# w2 chain removed): the forward / PDL / attention tests at the defaults, and the step against the build of runs
# 219-221 (v4_decode_base, 9f6051e) on both models.
#   usage (GPU machine, repo root; .gpubin: test_gpu, test_gpu_model, v4_decode, v4_decode_base):
#     bash tools/gpu/calls/session42_call3.sh (~4 min)
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="tests_kernels|\$b/test_gpu --gtest_filter='GpuSinkAttention.*:GpuPdl.*';
tests_model|\$b/test_gpu_model --gtest_filter='V4GpuForward.*:V41GpuForward.*:GpuPdlModel.*:GpuAttentionPdl.*';
ab_bin_v4|OUT=\$OUT/ab_bin_v4 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_base v4_decode' 3;
ab_bin_v41|OUT=\$OUT/ab_bin_v41 bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_base v4_decode' 2 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
