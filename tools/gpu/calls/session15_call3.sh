#!/usr/bin/env bash
# Third device call of session 15 (binaries of c491f1f): the MoE's routing tail in the routed w1|w3's blocks
# (DEEPINFER_MOE_ROUTE_TAIL=experts, bench/gpu/NOTES.md "Routing tail in the expert blocks"): its bitwise tests first
# (each under a timeout: a wrong barrier count hangs), then same-call A/Bs on 16 V4-Flash and 10 V4.1-Flash layers
# (4K, `v4_decode --quick --pdl on`), and a V4 batch-1 timeline with the tail on.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session15_call3.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='rtail_tests|timeout 150 $b/test_gpu_model --gtest_filter="GpuMoe.RouteTailBitwise:GpuMoeRouteTail.*";
ab_rtail|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_ROUTE_TAIL "last_block experts" 2;
ab_rtail_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_ROUTE_TAIL "last_block experts" 2 --family v41;
trace_v4_rtail|DEEPINFER_MOE_ROUTE_TAIL=experts OUT=$OUT/trace_v4_rtail bash tools/gpu/trace_decode.sh 1 16'
exec bash "$(dirname "$0")/../device_call.sh"
