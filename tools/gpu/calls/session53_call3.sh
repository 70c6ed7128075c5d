#!/usr/bin/env bash
# Written in session 53, against main at 8b2dfed (V4's spread site with compile-time amax rounds landed in 7e7fa0e):
#   v4_decode_gemv2  bench/gpu/attempts/session53_gemv_fastdiv_halves.patch: helper-157's wo_a GEMV without its
#                    pre-wait weight loads (run 251: +0.8 % V4.1 with them): the row's group by FastDiv, the F2FP
#                    halves without shifts, the dead `t0 < rows` branches gone (632 instructions, was 1024)
#   v4_decode_nq2    bench/gpu/attempts/session53_norm_quantize_rows_lanes.patch: helper-155's query-norm quantize
#                    (a held-row kernel for decode rows, fp8_quantize_kernel by compile-time lanes, the KV norm-rope's
#                    weights towards L1 before its wait) on main alone, with the compile-time amax rounds of
#                    layers/quant/fp8_quant_lanes.cuh instead of helper-152's pairs / tree (mhc.cu now shares them:
#                    its 17 kernels the same SASS)
#   v4_decode_all    both
# 8 alternating repeats, both models, batches 1 / 8; then the GEMV, norm, quantize and site tests with both patches.
#   pack (here; ~10 min): S=bench/gpu/attempts; ALL=1 KEEP_STAGE=/tmp/stage53c tools/gpu/pack_patch_ab.sh \
#     gemv2=$S/session53_gemv_fastdiv_halves.patch nq2=$S/session53_norm_quantize_rows_lanes.patch
#   usage (GPU machine, repo root): bash tools/gpu/calls/session53_call3.sh (QUICK=1: 3 repeats). ~5 min.
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
bins="v4_decode v4_decode_gemv2 v4_decode_nq2 v4_decode_all"
steps="$(bin_ab_models ab_s53c "$bins" 8 3)"
tests='GpuW8A16.*:GpuRmsNorm.*:GpuRope.*:GpuKvCache.*:GpuFp8Quantize.*:GpuBatchInvariance.*:GpuMhc.*:GpuHcSiteSpread.*'
tests+=':GpuHcLaggedSite.*:GpuPdlModel.*:GpuDecodeFused.*:GpuQuantPrologue.*'
steps+=";
$(filtered_tests_steps "$tests")"
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
