#!/usr/bin/env bash
# Written in session 53: helper-157's wo_a GEMV (bench/gpu/attempts/session53_gemv_wait_first_batch.patch: the
# one-token kernel's first batch of weight codes and scales loaded before its PDL wait, the row's group by FastDiv,
# the F2FP halves without shifts; 0.05-0.3 % of batch 1 expected) and run 250's `rounds` cut alone again
# (session53_sq_base.patch + session53_sq_cut_rounds.patch; V4 -0.34 %, V4.1 -0.17 % at batch 1 there), against main
# at eeef166, 8 alternating repeats, both models, batches 1 / 8; then the GEMV and site tests (with both patches) and
# a batch-1 trace of the GEMV build (V4, 16 layers: wo_a's place after the merge).
#   pack (here; ~8 min): S=bench/gpu/attempts; KEEP_STAGE=/tmp/stage53b tools/gpu/pack_patch_ab.sh \
#     gemv=$S/session53_gemv_wait_first_batch.patch rounds=$S/session53_sq_base.patch+$S/session53_sq_cut_rounds.patch
#   usage (GPU machine, repo root): bash tools/gpu/calls/session53_call2.sh (QUICK=1: 3 repeats, no trace). ~5 min.
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
bins="v4_decode v4_decode_gemv v4_decode_rounds"
steps="$(bin_ab_models ab_s53b "$bins" 8 3)"
site='GpuW8A16.*:GpuHcLaggedSite.*:GpuV41SiteEntry.*:GpuMhc.*:GpuHcSiteSpread.*:GpuPdlModel.*:GpuDecodeFused.*'
steps+=";
$(filtered_tests_steps "$site")"
if [ "${QUICK:-0}" != 1 ]; then
  steps+=";
trace_gemv_b1_v4|mkdir -p /tmp/tg && ln -sf \$b/v4_decode_gemv /tmp/tg/v4_decode && b=/tmp/tg OUT=\$OUT/trace_gemv_b1_v4 bash tools/gpu/trace_decode.sh 1 16"
fi
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
