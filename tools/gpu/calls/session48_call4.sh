#!/usr/bin/env bash
# Session 48: helper-131's third SASS audit (the attention split's key copies issued after all their row pointers,
# the packed records decoded in batches of 8 rows, the decode indexer's score blocks counting their own scores from
# shared memory) against HEAD (826f698's sources).
#   .gpubin/bins.tar.xz (one xz pack, 192 MiB dictionary): v4_decode (the base), v4_decode_audit3, test_gpu and
#   test_gpu_model (both with it), all stripped.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session48_call4.sh   (~3 min)
#   QUICK=1: the tests and the A/B at batch 1, 2 repeats (~1.5 min).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
tests="tests_kernels|\$b/test_gpu --gtest_filter='GpuKvRecord*:GpuSinkAttention.*:GpuBatchInvariance.Sink*';
tests_model|\$b/test_gpu_model --gtest_filter='GpuDecodeFused.IndexerSelection*:GpuCsa2SelectBins.*:GpuCsa2ScoreShape.*'"
export EXTRA_GPU0="$tests;
$(bin_ab_models ab_audit3 "v4_decode v4_decode_audit3")"
[ "${QUICK:-0}" = 1 ] || EXTRA_GPU0+=";
$(bin_ab_step ab_audit3_v4_fp8kv "v4_decode v4_decode_audit3" 2 '--batches 1' DEEPINFER_KV_FORMAT=fp8)"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
