#!/usr/bin/env bash
# Fifth device call of session 14: every one-GPU suite with gemm_bf16's one-row GEMV (the indexers' head-weight
# projections, V4.1's CSA2 compressor kv), then A/Bs of DEEPINFER_BF16_GEMV=0 (cuBLAS everywhere) against the default.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session14_call5.sh
set -uo pipefail
export EXTRA_GPU0='ab_gemv|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BF16_GEMV "0 1" 2;
ab_gemv_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BF16_GEMV "0 1" 2 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
