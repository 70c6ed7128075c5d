#!/usr/bin/env bash
# Session 32, fifth call: two defaults re-measured after session 31's late ring release (which changed when the
# decode rings' stages free): the dense FP8 products' ring depth (DEEPINFER_STREAM_STAGES, default 2 since run 76)
# and the routed MXFP4 leftover items' placement (DEEPINFER_FP4_ITEMS, the weights' choice: V4 even, V4.1 front,
# run 159), same-run A/Bs on both models at main's code (84faa5c; each switch changes no bit).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session32_call5.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="stages_v4|OUT=\$OUT/stages_v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_STREAM_STAGES '2 3 4' 2;
stages_v41|OUT=\$OUT/stages_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_STREAM_STAGES '2 3 4' 2 --family v41;
items_v4|OUT=\$OUT/items_v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_FP4_ITEMS 'even front' 2;
items_v41|OUT=\$OUT/items_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_FP4_ITEMS 'even front' 2 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
