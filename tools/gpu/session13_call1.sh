#!/usr/bin/env bash
# Planned first device call of session 13 (written in session 12; binaries of the last commit, packed with
# tools/gpu/pack_prebuilt.sh, which keeps every binary within the carry limit): every one-GPU suite at the defaults,
# then the latency microbenchmarks of session 12's compiled-not-run work (bench/gpu/NOTES.md "Decode select bins2",
# "mHC site latency", "Instruction fetch of the serial tails").
#   usage (GPU machine, repo root): bash tools/gpu/session13_call1.sh
set -uo pipefail
export EXTRA_GPU0='index_select_latency_tail|$b/index_select_latency --out $OUT/index_select_latency.json;
mhc_site_latency_tail|$b/mhc_site_latency --out $OUT/mhc_site_latency.json;
route_latency_tail|$b/route_latency --out $OUT/route_latency.json'
exec bash "$(dirname "$0")/device_call.sh"
