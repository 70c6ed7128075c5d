#!/usr/bin/env bash
# Fourth device call of session 15 (binaries of 186d4ee): the one-row dispatch by one warp
# (DEEPINFER_MOE_DISPATCH=warp, bench/gpu/NOTES.md "One-row dispatch by one warp"): its bitwise tests, same-call A/Bs
# on 16 V4-Flash and 10 V4.1-Flash layers (4K, `v4_decode --quick --pdl on`), the routing stamps with it on; and the
# MXFP4 decode stream's ring depth cap (DEEPINFER_STREAM_FP4_STAGES, default 0 = as many as fit) at 4 stages.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session15_call4.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='wdisp_tests|timeout 150 $b/test_gpu_model --gtest_filter="GpuMoe.WarpDispatchBitwise:GpuMoeWarpDispatch.*";
ab_wdisp|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_DISPATCH "block warp" 2;
ab_wdisp_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_DISPATCH "block warp" 2 --family v41;
ab_fp4_stages|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_FP4_STAGES "0 4" 2;
ab_fp4_stages_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_FP4_STAGES "0 4" 2 --family v41;
stamps_v4_warp|DEEPINFER_MOE_DISPATCH=warp $b/v4_decode --quick --pdl on --route-stamps --out $OUT/rs_v4_warp.json;
stamps_v41_warp|DEEPINFER_MOE_DISPATCH=warp $b/v4_decode --quick --family v41 --pdl on --route-stamps --out $OUT/rs_v41_warp.json'
exec bash "$(dirname "$0")/../device_call.sh"
