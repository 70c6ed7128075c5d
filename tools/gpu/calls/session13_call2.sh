#!/usr/bin/env bash
# Second device call of session 13 (rewritten after call 1, run 78): the test_gpu cases the 420 s step limit cut in
# run 78 (everything after StreamWarpTilesBitwise), the mHC site finish v2 and two-stage decode stream under the model
# paths, then whole-model A/Bs (16 V4-Flash layers, 4K, `v4_decode --quick --pdl on`): mHC finish v1 / v2 on V4,
# route v1 / v2 on V4.1 (a step may not contain ';': device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session13_call2.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='gpu_tests_rest|$b/test_gpu --gtest_filter="GpuFp8Gemm.WgmmaPrefillShapes:GpuFp8Gemm.MidRowsShapes:GpuFp8Gemm.MidSplitRowsShapes:GpuRouter.TopKMatchesReferenceBitwise:GpuRouter.SqrtSoftplusTopK:GpuSampling.GreedyArgmax:GpuSampling.TokenBitmask:StreamFp4Wgmma.FourBitWidening:StreamFp4Wgmma.KOrder:GpuStreamFp4Wgmma.V4Shapes:GpuStreamFp4Wgmma.V41Shapes:GpuStreamFp4Wgmma.EdgeShapes:GpuStreamFp4Wgmma.BatchInvariance:GpuStreamFp4Wgmma.SwigluPrologue:GpuStreamFp8Wgmma.V4Shapes:GpuStreamFp8Wgmma.V41Shapes:GpuStreamFp8Wgmma.EdgeShapes:GpuStreamFp8Wgmma.Declines";
hc_finish_v2|DEEPINFER_HC_SITE_FINISH=v2 $b/test_gpu --gtest_filter="GpuMhc.*:GpuPdl.*:GpuHcSiteSpread.*";
stages2_model|DEEPINFER_STREAM_STAGES=2 DEEPINFER_HC_SITE_FINISH=v2 $b/test_gpu_model --gtest_filter="V4GpuForward.*:V41GpuForward.*";
ab_hc_finish|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_HC_SITE_FINISH "v1 v2" 2;
ab_route_kernel_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_ROUTE_KERNEL "v1 v2" 2 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
