#!/usr/bin/env bash
# Session 46, second call: the w1|w3 -> w2 chain in one launch (DEEPINFER_MOE_CHAIN=1; cuda/stream_fp4_wgmma.cuh
# fp4_wgmma_chain_kernel, bench/gpu/NOTES.md "Session 46") and, in the same call, session46_call1.sh's sweep of the
# older decode switches (if call 1 did not run). Ran as run 229 (QUICK=1 SWEEP=0, on an H100); the chain lost and was
# deleted (bench/gpu/attempts/session46_moe_chain.patch), so its steps now find no switch and no tests.
#  1. Tests: GpuStreamFp4Wgmma.* (ChainSameBits: h and y bitwise the two launches, the ready words back at zero; the
#     rest: the existing kernels after the SwiGLU prologue's coherent-load template argument), GpuMoeChain.* (both
#     models' steps bitwise on / off). A hang here is the chain's wait (a deadlock): the step's timeout ends it.
#  2. ENV A/B, 3 repeats, batches 1 / 2 / 8 on both models: prediction V4 batch 1 -2 to -3.5 %, V4.1 -1.5 to -2.5 %
#     (w2's launch gap ~1.7 us and its first-stage ramp ~3 us a layer overlap w1|w3's tail); falsifier: batch 1 flat
#     (then the w2 consumers' wait for the last w1|w3 block of their expert costs what the gap did).
#  3. With SWEEP=1 (default): the sweep of session46_call1.sh.
#   usage (GPU machine, repo root; .gpubin: test_gpu, test_gpu_model, v4_decode of this commit or later):
#     bash tools/gpu/calls/session46_call2.sh   (~7-8 min with the sweep, ~3 min without: SWEEP=0)
set -uo pipefail
export SKIP_SUITES=1
C=DEEPINFER_MOE_CHAIN=1
# QUICK=1 (with SWEEP=0, ~2 min, for a call on little device time): only ChainSameBits, 2 repeats at batches 1 / 8.
if [ "${QUICK:-0}" = 1 ]; then KF=ChainSameBits REPS=2 BATCHES=1,8; else KF='*' REPS=3 BATCHES=1,2,8; fi
STEPS="tests_kernels|\$b/test_gpu --gtest_filter='GpuStreamFp4Wgmma.$KF';
tests_model|\$b/test_gpu_model --gtest_filter='GpuMoeChain.*';
ab_chain_v4|OUT=\$OUT/ab_chain_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: chain:$C' $REPS --batches $BATCHES;
ab_chain_v41|OUT=\$OUT/ab_chain_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: chain:$C' $REPS --family v41 --batches $BATCHES"
if [ "${SWEEP:-1}" = 1 ]; then
  # session46_call1.sh's steps, reused as they are (its EXTRA_GPU0 minus its test step).
  SWEEP_STEPS=$(EXTRA_ONLY=1 bash "$(dirname "$0")/session46_call1.sh")
  STEPS+=";
$SWEEP_STEPS"
fi
export EXTRA_GPU0="$STEPS"
exec bash "$(dirname "$0")/../device_call.sh"
