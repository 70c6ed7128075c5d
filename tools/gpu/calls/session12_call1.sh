#!/usr/bin/env bash
# Session 12's first device call (binaries of 23f31bc): every one-GPU suite (test_gpu, test_gpu_model: the
# store_pick refactor and v2's rolled scores of session 11 were compiled, not run), then the instruction-fetch test
# (bench/gpu/NOTES.md "Instruction fetch of the serial tails"): icache_probe (one warp running code its SM never ran,
# L2 warm / cold / SM warm) and the fused routing's phase stamps with and without an L2 flush before each call.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session12_call1.sh
set -uo pipefail
export EXTRA_GPU0='icache_probe_tail|$b/icache_probe --out $OUT/icache_probe.json;
route_phases_tail|$b/roofline --route-phases-only --out $OUT/route_phases.json'
exec bash "$(dirname "$0")/../device_call.sh"
