#!/usr/bin/env bash
# Last device call of session 15 (binaries of the session's last code): every one-GPU suite at the defaults (they
# include GpuMoe.RoutePrefetchSameBits and the helpers' EnvSwitch conversions), then the routing inputs' L2 prefetch
# (DEEPINFER_MOE_ROUTE_PREFETCH=1) in same-call A/Bs on 16 V4-Flash and 10 V4.1-Flash layers (4K, `v4_decode --quick
# --pdl on`) and the V4 routing stamps with it on.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session15_call5.sh
set -uo pipefail
export EXTRA_GPU0='ab_prefetch|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_ROUTE_PREFETCH "0 1" 2;
ab_prefetch_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_ROUTE_PREFETCH "0 1" 2 --family v41;
stamps_v4_prefetch|DEEPINFER_MOE_ROUTE_PREFETCH=1 $b/v4_decode --quick --pdl on --route-stamps --out $OUT/rs_v4_prefetch.json;
stamps_v4|$b/v4_decode --quick --pdl on --route-stamps --out $OUT/rs_v4.json'
exec bash "$(dirname "$0")/../device_call.sh"
