#!/usr/bin/env bash
# Written in session 55: where v13 (V4's grouped MXFP4 prefill at act block 128, NT 11 / 12) waits, per SASS
# instruction (ncu warp stall samples), on the 16384-token V4 w13 launch (launch-skip 0: the v8 row's first launch,
# v13 at > 112 rows a group) and a w2 launch (skip 40: w13's v8 and v13 rows are 16 launches each), for the choice
# between helper-161's levers 3 / 4 and helper-163's per-item ones (NOTES "Session 54": the promotion side left serial).
#   pack: session55_call1.sh's (roofline = main; mxfp4_prefill.cu unchanged since 20e3b12).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session55_call2.sh
set -uo pipefail
export SKIP_SUITES=1
cmd='$b/roofline --prefill-only --prefill-16k --quick --out $OUT/x.json'
export EXTRA_GPU0="ncu_v13_w13|bash tools/gpu/ncu_sass_stalls.sh v13_w13 mxfp4_prefill_v13_kernel 0 -- $cmd;
ncu_v13_w2|bash tools/gpu/ncu_sass_stalls.sh v13_w2 mxfp4_prefill_v13_kernel 40 -- $cmd"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
