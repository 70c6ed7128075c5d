#!/usr/bin/env bash
# Written in session 57, not run: every single-GPU `gpu` test with REF4's bf16 rounding of the expert GEMMs
# (bench/gpu/attempts/session57_ref4_expert_rounding.patch: the GPU's swiglu() and both combines, and the CPU
# forward's swiglu_expert_accumulate under the official numerics, in one step, so the GPU tests' CPU references
# follow). As session54_call2.sh: test_gpu beside both halves of test_gpu_model, nothing else (~390 s on an H100).
#   pack (here): KEEP_STAGE=/tmp/st57 tools/gpu/pack_patch_ab.sh \
#     ref4=bench/gpu/attempts/session57_ref4_expert_rounding.patch
#     (test_gpu / test_gpu_model with the patch, v4_decode and v4_decode_ref4 for session57_call7.sh)
#   usage (GPU machine, repo root): bash tools/gpu/calls/session57_call6.sh
set -uo pipefail
unset SKIP_SUITES EXTRA_GPU0 EXTRA_GPU1
exec bash "$(dirname "$0")/../device_call.sh"
