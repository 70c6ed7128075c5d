#!/usr/bin/env bash
# Last device call of session 24 (binaries of 155e64b: every default of the session: the MoE combine read by the next
# mHC site, the attention merge's batched loads): every one-GPU `gpu` suite, then the standing batch-1 numbers beside
# the site combine switched off (V4, V4.1), and a zero-code re-check of the cluster split + merge attention
# (DEEPINFER_DECODE_FUSED_ATTENTION=1, slower when last measured; the merge it shares is faster now).
# Two calls (the suites alone take ~9 of a call's 10 minutes): `suites`, then `standing` (SKIP_SUITES=1, the A/Bs).
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session24_call4.sh suites|standing
set -uo pipefail
if [ "${1:-}" = suites ]; then exec bash "$(dirname "$0")/../device_call.sh"; fi
export SKIP_SUITES=1 EXTRA_GPU0='standing|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_SITE_COMBINE "0 1" 2;
standing_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_SITE_COMBINE "0 1" 2 --family v41;
fused_attention|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_DECODE_FUSED_ATTENTION "0 1" 2'
exec bash "$(dirname "$0")/../device_call.sh"
