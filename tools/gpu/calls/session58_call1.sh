#!/usr/bin/env bash
# Session 58: every single-GPU `gpu` test with REF4's bf16 rounding of the expert GEMMs (the SwiGLU's g, u and a, the
# combine's outputs; CPU and GPU together) and the prefill kernel's bf16 h / y (MoeCombineParts::expert_y_bf16): the
# working tree of the session's first commits. As session54_call2.sh: test_gpu beside both halves of test_gpu_model,
# nothing else (~390 s on an H100).
#   pack (here): ninja -C build-cuda test_gpu test_gpu_model roofline v4_decode, then
#     PACK_ONLY="roofline test_gpu test_gpu_model" EXTRA_BINS="/tmp/st58/v4_decode /tmp/st58/v4_decode_new" \
#     BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh   (v4_decode: main before the change; _new: with it)
#   usage (GPU machine, repo root): bash tools/gpu/calls/session58_call1.sh
set -uo pipefail
unset SKIP_SUITES EXTRA_GPU0 EXTRA_GPU1
exec bash "$(dirname "$0")/../device_call.sh"
