#!/usr/bin/env bash
# Session 30, second call (test_gpu_model of the experiment build: DEEPINFER_RACE_PROBE, skinny::Args::race_probe):
# which change stops the side-stream race of GpuMoe.DecodeV8InvariantRunToRunFullWidth (4 of 5 plain runs failed in
# run 165 with the shared-memory poison, never a non-finite value). Bit 0: the activation loads of stream_gemm's
# stage_rows (x's FP8 codes and scales, the SwiGLU prologue's h) through L2 (__ldcg) instead of ld.global.nc;
# bit 1: fence.proxy.async.shared::cta before a consumer warp releases its ring stage; bit 2: fence.cta there.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session30_call2.sh
set -uo pipefail
t='$b/test_gpu_model --gtest_filter=GpuMoe.DecodeV8InvariantRunToRunFullWidth --gtest_repeat=8'
steps=""
for p in 0 1 2 4 0b; do
  steps="$steps probe$p|DEEPINFER_RACE_PROBE=${p%b} timeout 100 $t > \$OUT/probe$p.log 2>&1 || true && echo failed_iterations=\$(grep -c 'FAILED  ] GpuMoe.*ms)' \$OUT/probe$p.log) && grep -h 'mismatches=[1-9]' \$OUT/probe$p.log | cut -c30-200 | head -8;"
done
export SKIP_SUITES=1 EXTRA_GPU0="$steps"
exec bash "$(dirname "$0")/../device_call.sh"
