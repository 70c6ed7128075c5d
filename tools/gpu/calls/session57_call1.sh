#!/usr/bin/env bash
# Written in session 57: session 56's warpgroup stagger experiment (bench/gpu/attempts/
# session56_prefill_v13_wg_stagger.patch; tools/gpu/calls/session56_call6.sh's rounds: DEEPINFER_PREFILL_STAGGER
# 0 / 800 / 1600 / 2400 SM cycles alternating over 3 rounds of `--prefill-only --prefill-16k --quick --sustained
# --sustain-ms 300`, clock log beside the call), then the prefill GEMM's bitwise tests with the patch at the largest
# stagger (a delayed warpgroup must leave the stage ring's handshakes and the bits as they are).
#   pack (here): the patch applied, `ninja -C build-cuda roofline test_gpu test_gpu_model`,
#     PACK_ONLY="roofline test_gpu test_gpu_model" BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh, the patch
#     reverted
#   usage (GPU machine, repo root): bash tools/gpu/calls/session57_call1.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(PRINT_ONLY=1 bash "$(dirname "$0")/session56_call6.sh")"
steps+=";
tests_kernels|DEEPINFER_PREFILL_STAGGER=2400 \$b/test_gpu --gtest_filter='GpuMoePrefillGemm.*';
tests_model|DEEPINFER_PREFILL_STAGGER=2400 \$b/test_gpu_model --gtest_filter='GpuMoePrefillGemm.*:GpuMoe.*'"
export EXTRA_GPU0="$steps"
clock_logged
