#!/usr/bin/env bash
# Last device call of session 27 (binaries of main + V4.1's FFN combine read by the next site entry,
# DEEPINFER_MOE_SITE_COMBINE=0|1, now also V4.1's; every default of the session: the routing's warp dispatch, kept
# counters, gate early):
#   1. same-call A/Bs of the site combine, V4.1 (10 layers; 3 reps) and V4 (16 layers, 4K; 2 reps, its known -1.7 %:
#      the standing numbers at the defaults), into $OUT/ab.tar.gz;
#   2. every one-GPU suite (test_gpu, test_gpu_model: the session's new tests among them), into $OUT/results.tar.gz.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session27_call3.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
SKIP_SUITES=1 EXTRA_GPU0='ab_site_combine_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_SITE_COMBINE "0 1" 3 --family v41;
ab_site_combine|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_SITE_COMBINE "0 1" 2' \
  OUT="$OUT" bash "$(dirname "$0")/../device_call.sh"
mv "$OUT/results.tar.gz" "$OUT/ab.tar.gz"
OUT="$OUT" bash "$(dirname "$0")/../device_call.sh"
