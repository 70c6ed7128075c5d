#!/usr/bin/env bash
# Planned first device call of session 13 (written in session 12; binaries of the last commit, packed with
# tools/gpu/pack_prebuilt.sh, which keeps every binary within the carry limit): every one-GPU suite at the defaults,
# then the latency microbenchmarks of session 12's compiled-not-run work (bench/gpu/NOTES.md "Decode select bins2",
# "mHC site latency", "Instruction fetch of the serial tails") and the prefill v10 / v10h rows beside v9 (NOTES
# "Grouped MXFP4 prefill v9 read from its SASS"; the bitwise tests are in test_gpu's GpuMoePrefillGemm.*).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session13_call1.sh
set -uo pipefail
export EXTRA_GPU0='index_select_latency_tail|$b/index_select_latency --out $OUT/index_select_latency.json;
mhc_site_latency_tail|$b/mhc_site_latency --out $OUT/mhc_site_latency.json;
route_latency_tail|$b/route_latency --out $OUT/route_latency.json;
prefill_v10|$b/roofline --prefill-only --quick --out $OUT/roofline_prefill.json'
exec bash "$(dirname "$0")/../device_call.sh"
