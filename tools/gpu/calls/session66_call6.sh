#!/usr/bin/env bash
# Session 66 leaves (compiled, not run): V4.1's CSA2 selector under V4's one-wave rule
# (bench/gpu/attempts/session66_csa2_selector_one_wave.patch: the ticket where the selector's one more block a row
# would pass kDecodeBlocks / rows, as at 8 rows of a 4K context, 34 x 8 = 272 blocks against one wave of 264; run 299
# measured V4's same grid at batch 8 +0.75 %). Steps: the CSA2 select tests and the V4.1 forwards on the patched
# test_gpu_model, then V4.1 HEAD's v4_decode against the patched one at batches 1 and 8 (4 repeats; batch 1 must not
# move: one row keeps the selector).
#   pack (here): apply the patch, `ninja -C build-cuda test_gpu_model v4_decode`, copy gpu/bench/v4_decode to
#     /tmp/st67/v4_decode_csa2, revert the patch, `ninja -C build-cuda v4_decode` (HEAD's), then
#     PACK_ONLY="test_gpu_model v4_decode" EXTRA_BINS=/tmp/st67/v4_decode_csa2 BUILD_DIR=build-cuda
#     bash tools/gpu/pack_prebuilt.sh (test_gpu_model stays the patched build: only v4_decode is rebuilt after the
#     revert)
#   usage (GPU machine, repo root): bash tools/gpu/calls/session66_call6.sh   (~3 min)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="tests_csa2|\$b/test_gpu_model --gtest_filter='GpuCsa2SelectBins.*:GpuCsa2ScoreShape.*:GpuV41Modules.*:V41GpuForward.*';
$(bin_ab_step ab_v41 "v4_decode v4_decode_csa2" 4 "--family v41 --batches 1,8")"
clock_logged
