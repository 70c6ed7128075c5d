#!/usr/bin/env bash
# Session 68, lead F built (docs/status.md issue 4 "Open leads" F; bench/gpu/NOTES.md "Session 68"): the index scores'
# dot products on the tensor cores (index_scoring.cuh tile_dots: bf16 mma.sync, queries as hi + lo pairs), in one call:
#   1. the exactness probes (GpuWgmmaExactness, GpuMmaBf16Exactness: is the bf16 mma.sync's 128-product sum exact
#      within the 24-bit bound?);
#   2. the select / indexer tests (INDEX_SELECT_TESTS) on the new build;
#   3. V4 and V4.1 decode, HEAD's engine (v4_decode_base, 10d76343) against the new one, 4 repeats (even: the arm
#      order reverses every other repeat), batches 1 and 8, with the logits digests (unchanged = the same selections);
#   4. the whole test_gpu_model on the new build (~4 min).
#   pack (here): PACK_ONLY="test_gpu test_gpu_model v4_decode" EXTRA_BINS="/tmp/v4_decode_base"
#     BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh   (/tmp/v4_decode_base: 10d76343's v4_decode)
#   usage (GPU machine, repo root): bash tools/gpu/calls/session68_call2.sh   (~7 min)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="probes|\$b/test_gpu --gtest_filter='GpuWgmmaExactness.*:GpuMmaBf16Exactness.*';
tests_select|\$b/test_gpu_model --gtest_filter='$INDEX_SELECT_TESTS';
$(bin_ab_models ab "v4_decode_base v4_decode" 4);
tests_model_full|\$b/test_gpu_model"
clock_logged
