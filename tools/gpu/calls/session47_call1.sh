#!/usr/bin/env bash
# Session 47: session 46's two pending calls in one (one machine start; session 46 lost ~1,000 s to failed starts).
#  1. The chain's follow-up variants (session46_call3.sh's steps) on a second pack, .gpubin/chain.tar.xz: HEAD with
#     bench/gpu/attempts/session46_moe_chain_v2.patch applied (git apply --3way), built and packed as test_gpu,
#     test_gpu_model, v4_decode. Unpacked into /tmp/deepinfer-chain by its first step.
#  2. The older decode switches one away from today's defaults (session46_call1.sh's sweep) on .gpubin/bins.tar.xz
#     (HEAD's test_gpu, v4_decode).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session47_call1.sh   (~8 min)
#   QUICK=1: the chain A/B at batch 1 (2 repeats) and the V4 sweep at batch 1 (~3 min).
set -uo pipefail
export SKIP_SUITES=1
c=/tmp/deepinfer-chain
A="base: chain:DEEPINFER_MOE_CHAIN=1 w2_100:DEEPINFER_MOE_CHAIN=1,DEEPINFER_MOE_CHAIN_W2_BLOCKS=100"
unpack="mkdir -p $c && tar -xf .gpubin/chain.tar.xz -C $c"
if [ "${QUICK:-0}" = 1 ]; then
  chain="chain_tests|$unpack && $c/test_gpu --gtest_filter='GpuStreamFp4Wgmma.ChainSameBits';
chain_ab_v4|OUT=\$OUT/chain_ab_v4 bash tools/gpu/decode_switch_ab.sh $c ENV '$A' 2 --batches 1"
  sweep=$(QUICK=0 EXTRA_ONLY=1 bash "$(dirname "$0")/session46_call1.sh" | head -n 1 | sed 's/;$//; s/--batches 1,8/--batches 1/')
else
  chain="chain_tests|$unpack && $c/test_gpu --gtest_filter='GpuStreamFp4Wgmma.ChainSameBits';
chain_tests_model|$c/test_gpu_model --gtest_filter='GpuMoeChain.*';
chain_ab_v4|OUT=\$OUT/chain_ab_v4 bash tools/gpu/decode_switch_ab.sh $c ENV '$A' 2 --batches 1,8;
chain_ab_v41|OUT=\$OUT/chain_ab_v41 bash tools/gpu/decode_switch_ab.sh $c ENV '$A' 2 --family v41 --batches 1,8"
  sweep="tests|\$b/test_gpu --gtest_filter='GpuStreamFp4Wgmma.*';
$(QUICK=0 EXTRA_ONLY=1 bash "$(dirname "$0")/session46_call1.sh")"
fi
export EXTRA_GPU0="$chain;
$sweep"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
