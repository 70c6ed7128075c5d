#!/usr/bin/env bash
# Session 50's short form of session49_call1.sh for a call with ~250 s of device time left: six of its ten builds
# (the base, every patch together, the MXFP4 chain's first and last sets, the site and the routing), batch 1, two
# repeats a build and model, no tests (the logits digest a batch is the bitwise check against the base). Same pack.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session50_call0.sh   (~2.5 min)
set -uo pipefail
export SKIP_SUITES=1 QUICK=1
source "$(dirname "$0")/steps.sh"
bins="v4_decode v4_decode_all v4_decode_audit4 v4_decode_fp4_scales v4_decode_site_norm v4_decode_route_fence"
export EXTRA_GPU0="$(bin_ab_models ab_s50 "$bins")"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
