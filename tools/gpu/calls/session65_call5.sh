#!/usr/bin/env bash
# Session 65: the latency kernels' own phase benchmarks at ef96c19d, last run in session 13 (mhc_site_latency, run 78,
# H200) and session 12-28 (route_latency): which branch of V4's mHC site ends last (`comb_minus_tail_end` > 0: the
# comb warp's Sinkhorn steps, not the tail blocks' collapse -> norm -> codes, gate the kernel's end, and with it the
# PDL successor's wait), the hand-offs (`handoff_*`), and the fused routing's phases alone.
#   pack (here): `ninja -C build-cuda mhc_site_latency route_latency`, then PACK_ONLY="mhc_site_latency route_latency
#     v4_decode" BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session65_call5.sh   (~60 s)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="$(stamped_step site_latency mhc_site_latency '');
$(stamped_step route_latency route_latency '')"
clock_logged
