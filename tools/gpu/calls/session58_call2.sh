#!/usr/bin/env bash
# Session 58: first the suites run 275 (session58_call1.sh) failed in, with their CPU references and bounds brought to
# REF4's rounding (GpuMxfp4Experts.StreamSwigluPrologue's CPU SwiGLU, GpuMoe's row_bound term (d)), and the combine /
# site / prefill GEMM tests of the same change (steps tests_kernels, tests_model). Then what the prefill kernel's bf16 y
# saves (roofline --prefill-y bf16, the engine's form since this session,
# against f32, the form before it), 3 alternating rounds of `--prefill-only --prefill-16k --quick --sustained
# --sustain-ms 300` (steps prefill_y<f32|bf16>_<round>), clock log beside the call; then the decode BIN A/B of main
# before the change (v4_decode) against it (v4_decode_new: REF4's rounding in the SwiGLU and the combines; expected
# flat time, other digests), batches 1 and 8, V4 and V4.1.
#   pack (here): as session58_call1.sh (one pack serves both calls)
#   usage (GPU machine, repo root): bash tools/gpu/calls/session58_call2.sh
#   table (here): python3 tools/gpu/prefill_sustained_table.py DIR (DIR: the call's steps/ folder)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
args="--prefill-only --prefill-16k --quick --sustained --sustain-ms 300"
steps="$(filtered_tests_steps 'GpuMxfp4Experts.*:GpuMoe.*:GpuHcSiteSpread.*:GpuMoePrefillGemm.*');
"
steps+="$(flag_rounds_steps y --prefill-y "f32 bf16" 3 "$args");
"
steps+="$(bin_ab_models decode "v4_decode v4_decode_new")"
export EXTRA_GPU0="$steps"
clock_logged
