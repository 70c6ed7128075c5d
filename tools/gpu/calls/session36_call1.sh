#!/usr/bin/env bash
# The next device session's first call (prepared in session 35; session 36 had no device time): is the fused
# routing's last block slowed by its code's first fetch, as the decode selects' was (run 193), and does the selector
# form remove it?
# 1. The route stamps' warm rerun (v4_decode --route-stamps-warm, moe_gpu.h route_stamps_warm: each stamped launch's
#    last block routes its rows twice, ticket -> routed timing the second) against the plain stamps, both models.
# 2. The routing's selector form (DEEPINFER_ROUTE_SELECTOR=block, moe_gpu.h route_selector: block 0 rehearses the
#    rows' routing before its PDL wait, then routes once the other blocks have taken their tickets): its tests
#    (GpuMoe.RouteSelectorSameBits: the four bench layers eager and from graphs; GpuRouteSelector.*: both models'
#    steps, eager and graphs, bitwise the ticket form) beside the stamps' tests, and a same-call A/B on both models.
# The CSA2 selector's tests run too: 0f3a8e1 moved its poll to dev::spin_until_count (one instruction LD -> LDG).
# If a test fails, the selector form's wait (route_as_selector, moe_gpu.cu) or its block numbering (b = blockIdx.x -
# 1) is the first suspect; the production (ticket) kernels' instructions are unchanged (SASS compared in session 35).
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode): bash tools/gpu/calls/session36_call1.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="route_tests|\$b/test_gpu_model --gtest_filter='GpuMoe.RouteStamps*:GpuMoe.RouteSelectorSameBits:GpuRouteSelector.*:GpuCsa2SelectBins.SelectorBlock:GpuCsa2ScoreShape.V41StepBitwise';
route_v4|\$b/v4_decode --quick --pdl on --route-stamps --out \$OUT/route_v4.json;
route_warm_v4|\$b/v4_decode --quick --pdl on --route-stamps-warm --out \$OUT/route_warm_v4.json;
route_v41|\$b/v4_decode --quick --pdl on --family v41 --route-stamps --out \$OUT/route_v41.json;
route_warm_v41|\$b/v4_decode --quick --pdl on --family v41 --route-stamps-warm --out \$OUT/route_warm_v41.json;
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_ROUTE_SELECTOR 'ticket block' 4;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_ROUTE_SELECTOR 'ticket block' 4 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
