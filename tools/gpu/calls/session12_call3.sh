#!/usr/bin/env bash
# Session 12's third device call (binaries of ee3d270 plus v4_decode_old of 23f31bc): every one-GPU suite (the
# branch-free routing picks are on the default path; helper-76's stream switches add tests), route_latency after the
# change and the fused routing's phases (v1 / v2), the whole-model A/B of the routing change (binaries) on V4-Flash and V4.1-Flash, and of helper-76's
# switches DEEPINFER_STREAM_STAGES / DEEPINFER_STREAM_WARP_TILES (bench/gpu/NOTES.md "Decode stream: a shallow ring").
#   usage (GPU machine, repo root): bash tools/gpu/calls/session12_call3.sh
set -uo pipefail
export EXTRA_GPU0='route_latency_tail|$b/route_latency --out $OUT/route_latency.json;
ab_route|bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_old v4_decode" 2;
ab_route_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_old v4_decode" 2 --family v41;
route_phases_tail|$b/roofline --route-phases-only --out $OUT/route_phases.json;
ab_route_kernel|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_ROUTE_KERNEL "v1 v2" 2;
ab_stages|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_STAGES "0 2" 2;
ab_warp_tiles|DEEPINFER_STREAM_STAGES=2 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_WARP_TILES "0 2" 2'
exec bash "$(dirname "$0")/../device_call.sh"
