#!/usr/bin/env bash
# Session 37, fourth call: the fused routing's selector form as the default (DEEPINFER_ROUTE_SELECTOR=block since run
# 198: batch 1 -0.6 % on both models, the same token checksums). Every test of test_gpu_model at the new default (the
# model steps, PDL schedules, graph replays and the routing's own tests now take block 0 as the router; in
# device_call.sh's two halves, each under its 300 s step limit), then a same-call A/B of the switch on both models
# (2 repeats; `ticket` is the old default).
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode): bash tools/gpu/calls/session37_call4.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="model_a|\$b/test_gpu_model --gtest_filter='GpuEngine.*:V4GpuForward.*:GpuMoe.*';
model_b|\$b/test_gpu_model --gtest_filter='-GpuEngine.*:V4GpuForward.*:GpuMoe.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_ROUTE_SELECTOR 'ticket block' 2;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_ROUTE_SELECTOR 'ticket block' 2 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
