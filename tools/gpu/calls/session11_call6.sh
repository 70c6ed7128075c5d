#!/usr/bin/env bash
# Session 11's last device call (binaries of fec77a8: helper-75's routing kernel v2, opt-in, and v1's dispatch moved
# into helpers): v2 against v1 bit for bit (with both kernels' phase stamps at one row), the MoE suite on the default
# v1, and the same-call A/B of DEEPINFER_ROUTE_KERNEL on 16 V4-Flash layers.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session11_call6.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='route_v2_tests_tail|$b/test_gpu_model --gtest_filter="GpuMoe.FusedRouteV2*" 2>&1 | grep -E "phase|FAIL|OK|PASSED|mismatch|differ";
moe_tests|$b/test_gpu_model --gtest_filter="GpuMoe.*:GpuPdlModel.*";
ab_route|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_ROUTE_KERNEL "v1 v2" 2'
exec bash "$(dirname "$0")/../device_call.sh"
