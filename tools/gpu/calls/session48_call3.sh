#!/usr/bin/env bash
# Session 48: helper-130's GEMV load batching (bf16_gemv_pair_kernel: x loaded through asm so that all 30 loads of a
# batch issue before the first FFMA; w8a16_gemv_kernel<1, *>: a batch of two steps loaded, then applied) against
# HEAD (8cee7c3's sources, with both SASS audits).
#   .gpubin/bins.tar.xz (one xz pack, 192 MiB dictionary): v4_decode (the base), v4_decode_gemv2 and test_gpu (with
#   the change), all stripped.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session48_call3.sh   (~2 min)
#   QUICK=1: the tests and the A/B at batch 1, 2 repeats (~1 min).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
tests="tests|\$b/test_gpu --gtest_filter='GpuBf16Gemv.*:GpuW8A16.*:GpuPdl.*'"
export EXTRA_GPU0="$tests;
$(bin_ab_models ab_gemv2 "v4_decode v4_decode_gemv2")"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
