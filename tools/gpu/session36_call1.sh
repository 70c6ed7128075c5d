#!/usr/bin/env bash
# Session 36, first call (prepared in session 35, not run): is the fused routing's last block slowed by its code's
# first fetch, as the decode selects' was (run 193)? The route stamps' warm rerun (v4_decode --route-stamps-warm,
# moe_gpu.h route_stamps_warm: each stamped launch's last block routes its rows twice, ticket -> routed timing the
# second) against the plain stamps, both models, and the stamped kernels' tests (GpuMoe.RouteStampsSameBits,
# GpuMoe.RouteStampsWarmRerunSameBits: the same bits with the stamps and with the rerun). If the warm routed phase
# (cyc_r) is much shorter, the selector form of the CSA2 select (csa2_indexer_gpu.cu, NOTES "Session 35") is the
# model for the routing: a block known from the launch rehearses route_rows while the logit blocks work.
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode): bash tools/gpu/session36_call1.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="route_tests|\$b/test_gpu_model --gtest_filter='GpuMoe.RouteStamps*';
route_v4|\$b/v4_decode --quick --pdl on --route-stamps --out \$OUT/route_v4.json;
route_warm_v4|\$b/v4_decode --quick --pdl on --route-stamps-warm --out \$OUT/route_warm_v4.json;
route_v41|\$b/v4_decode --quick --pdl on --family v41 --route-stamps --out \$OUT/route_v41.json;
route_warm_v41|\$b/v4_decode --quick --pdl on --family v41 --route-stamps-warm --out \$OUT/route_warm_v41.json"
exec bash "$(dirname "$0")/device_call.sh"
