#!/usr/bin/env bash
# Session 46, written for a later session: the chain's follow-up variants (bench/gpu/attempts/session46_moe_chain_v2.patch,
# NOTES "Session 46"). Build first with the patch applied (git apply bench/gpu/attempts/session46_moe_chain_v2.patch;
# then build test_gpu, test_gpu_model, v4_decode and pack them); revert the patch after the pack unless it wins.
#  1. Tests: GpuStreamFp4Wgmma.ChainSameBits, GpuMoeChain.* (a hang is a deadlock in the chain's wait).
#  2. ENV A/B, 2 repeats, batches 1 / 8, both models: the base, the chain with one instantiation of the item code
#     (run 229's first form: +3.6 % V4, +1.6 % V4.1 at batch 1), and the chain with w2's items on the first 100 of the
#     132 blocks (the late-block test). Reading: chain ~flat or better -> the code size was the cost; w2_100 better
#     than chain -> the late blocks were; both still +1.5 % or worse -> the waits on each expert's slowest w1|w3 block.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session46_call3.sh   (~2.5 min)
set -uo pipefail
export SKIP_SUITES=1
A="base: chain:DEEPINFER_MOE_CHAIN=1 w2_100:DEEPINFER_MOE_CHAIN=1,DEEPINFER_MOE_CHAIN_W2_BLOCKS=100"
export EXTRA_GPU0="tests_kernels|\$b/test_gpu --gtest_filter='GpuStreamFp4Wgmma.ChainSameBits';
tests_model|\$b/test_gpu_model --gtest_filter='GpuMoeChain.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV '$A' 2 --batches 1,8;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV '$A' 2 --family v41 --batches 1,8"
exec bash "$(dirname "$0")/../device_call.sh"
