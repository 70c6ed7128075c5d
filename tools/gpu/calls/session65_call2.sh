#!/usr/bin/env bash
# Session 65: the landing check of session 64's SASS paths without the site part: bench/gpu/attempts/
# session64_sass_paths.patch's device_util.cuh, rms_norm.cuh (the packed bf16 rounding), sink_attention.cu (the
# split's query prologue rounding after the key lists' loads), stream_gemm.cuh and stream_fp4_wgmma.cuh (swiglu8,
# stage_b's L1 prefetches before the zeroing). Runs 288-289 (session64_call2.sh, session65_call1.sh) timed those
# subsets at or below HEAD (V4.1 batch 1 -0.5 to -1.3 %; V4 and batch 8 within noise) with the same logits digests.
# Steps: every single-GPU suite on the landing build (test_gpu, both halves of test_gpu_model: ~390 s), then HEAD's
# v4_decode (v4_decode_base, 2721111's engine) against the landing build, V4 and V4.1, batches 1 and 8, 3 repeats.
#   pack (here): the five files of the patch applied to HEAD, `ninja -C build-cuda test_gpu test_gpu_model v4_decode`,
#     then PACK_ONLY="test_gpu test_gpu_model v4_decode" EXTRA_BINS=/tmp/st64/v4_decode_base BUILD_DIR=build-cuda
#     bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session65_call2.sh
set -uo pipefail
unset SKIP_SUITES EXTRA_GPU1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="$(bin_ab_models dec "v4_decode_base v4_decode" 3)"
clock_logged
