#!/usr/bin/env bash
# Session 12's second device call: icache_probe with code that jumps over never-run blocks, and route_latency (one
# warp's top-k routing of one row, cycles per step) after run 74 found the straight-line fetch cost small.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session12_call2.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='icache_probe_tail|$b/icache_probe --out $OUT/icache_probe.json;
route_latency_tail|$b/route_latency --out $OUT/route_latency.json'
exec bash "$(dirname "$0")/../device_call.sh"
