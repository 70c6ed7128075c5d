#!/usr/bin/env bash
# Session 11's first device call (one H200; prebuilt binaries of HEAD in .gpubin), through tools/gpu/device_call.sh:
# the mHC site tests of test_gpu (refactored in session 10, not run since), test_gpu_model (all), and the batch-1 graph
# timeline of 16 V4-Flash layers under Nsight Systems (tools/gpu/nsys_decode.sh: per-kernel busy time, idle gaps, and
# every activity in start order).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session11_call1.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='mhc_tests|$b/test_gpu --gtest_filter="GpuMhc.*:GpuHcMixMma.*:GpuHcSiteSpread.*";
nsys_b1_tail|bash tools/gpu/nsys_decode.sh 1 16;
model_a|$b/test_gpu_model --gtest_filter="GpuEngine.*:V4GpuForward.*:GpuMoe.*";
model_b|$b/test_gpu_model --gtest_filter="-GpuEngine.*:V4GpuForward.*:GpuMoe.*"'
exec bash "$(dirname "$0")/../device_call.sh"
