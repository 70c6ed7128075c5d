#!/usr/bin/env bash
# Session 29, third call: every single-GPU `gpu` test suite (test_gpu, test_gpu_model) once, at the session's code:
# V4.1's routed products with their leftover items on the first blocks (Fp4Experts::front_items), the L2 prefetch
# branch deleted, GpuMoe.DecodeV9WideFullWidth with its reference run twice (run 159's 122-value mismatch).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session29_call3.sh
set -uo pipefail
unset SKIP_SUITES EXTRA_GPU0 EXTRA_GPU1
exec bash "$(dirname "$0")/../device_call.sh"
