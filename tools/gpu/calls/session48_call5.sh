#!/usr/bin/env bash
# Written in session 48 for the next session (not run: no device time left): helper-132's audit of the stream
# kernels' batch-1 phases (bench/gpu/attempts/session48_audit4_stream_consumers.patch: the MXFP4 stage_b's scales
# with its codes, the dense FP8 stream's first weight-scale line prefetched to L1 before its wait) against HEAD.
#   .gpubin/bins.tar.xz (one xz pack, 192 MiB dictionary): v4_decode of HEAD (the base), then with the patch applied
#   (`git apply`) v4_decode as v4_decode_audit4, test_gpu and test_gpu_model, all stripped
#   (`tar -cf - v4_decode v4_decode_audit4 test_gpu test_gpu_model | xz -T0 --lzma2=preset=6,dict=192MiB`).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session48_call5.sh   (~3 min)
#   QUICK=1: the tests and the A/B at batch 1, 2 repeats (~1.5 min).
# Never run: session 49 was lent no machine and folded this A/B into session49_call1.sh (packed by
# tools/gpu/pack_patch_ab.sh).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
tests="tests_kernels|\$b/test_gpu --gtest_filter='GpuFp8Gemm.*:GpuStreamFp4Wgmma.*'"
export EXTRA_GPU0="$tests;
$(bin_ab_models ab_audit4 "v4_decode v4_decode_audit4")"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
