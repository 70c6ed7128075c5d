#!/usr/bin/env bash
# Sixth device call of session 15 (v4_decode of dd56537 only): the routing's last block, its routed phase split at
# route_row_topk's marks inside the step (V4-Flash 16 layers, V4.1-Flash 10 layers, batch 1, 4K, graphs).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session15_call6.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='stamps_split_v4_tail|$b/v4_decode --quick --pdl on --route-stamps --out $OUT/rs_split_v4.json;
stamps_split_v41_tail|$b/v4_decode --quick --family v41 --pdl on --route-stamps --out $OUT/rs_split_v41.json'
exec bash "$(dirname "$0")/../device_call.sh"
