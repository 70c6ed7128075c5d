#!/usr/bin/env bash
# Fourth device call of session 14 (binaries of 0eec32e, the suites passed in call 3): the benchmark tables of both
# families at the new defaults (4K / 64K decode at batch 1..256, 4K / 32K prefill), the batch-1 timelines, and the
# routing phases again (does "tlb=thrashed" grow the top-k row-1 case again, and only it?).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session14_call4.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='tables_v4_tail|timeout 240 $b/v4_decode --chunk 2048 --pdl on --out $OUT/v4_decode_v4.json;
tables_v41_tail|timeout 200 $b/v4_decode --family v41 --chunk 2048 --pdl on --out $OUT/v4_decode_v41.json;
trace_b1|OUT=$OUT/trace_v4 bash tools/gpu/trace_decode.sh 1 16;
trace_b1_v41|OUT=$OUT/trace_v41 bash tools/gpu/trace_decode.sh 1 10 --family v41;
route_phases_again_tail|$b/roofline --route-phases-only --out $OUT/route_phases_again.json'
exec bash "$(dirname "$0")/../device_call.sh"
