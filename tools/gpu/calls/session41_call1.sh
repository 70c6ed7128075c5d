#!/usr/bin/env bash
# Session 41, first call (written in session 41, which was lent no machine; compiled, not run). Run it before
# session40_call1.sh (whose relay probe is this call's first step too; drop that step there if this call ran).
#  - stream_probe --act-only: does an activation relayed by a quiet cluster CTA (one multicast bulk copy) reach the
#    flooding CTAs well under mode 0's 1.9 / 4.8 us (2 / 6 stages)? docs/status.md "Next session" item 01.
#  - The relay built into the quantizing stream launch (wo_b at batch 1; DEEPINFER_STREAM_RELAY=2|4|8, default off,
#    DEEPINFER_STREAM_RELAY_SHARE=0|1|2): its bitwise test (relay vs default, clusters 2 / 4 / 8, shares 0 / 1 / 2, a
#    captured PDL chain with poisoned buffers), the quantizing prologue's tests (session 41 changed its bf16 load to
#    one 16-byte load: dev::Bf16x8 trivially copyable, SASS 16 LDG.E -> 4 LDG.E.128 a lane), both models' forward /
#    PDL tests with the relay on, the A/B on both models (base / relay 2 / 4 / 8, share 1; then share 0 and 2 at 4),
#    and the step stamps with the relay on and off (wo_b's first quantized unit after the PDL wait:
#    kFp8StQuantFirstUnit).
#   usage (GPU machine, repo root; .gpubin: test_gpu, test_gpu_model, v4_decode, stream_probe, roofline):
#     bash tools/gpu/calls/session41_call1.sh (~6 min; then session41_call2.sh)
set -uo pipefail
export SKIP_SUITES=1
R=DEEPINFER_STREAM_RELAY S=DEEPINFER_STREAM_RELAY_SHARE
export EXTRA_GPU0="relay_probe|timeout 120 \$b/stream_probe --act-only --out \$OUT/stream_probe_act.json > \$OUT/stream_probe_act.log 2>&1 || true && tail -28 \$OUT/stream_probe_act.log;
tests_relay|\$b/test_gpu --gtest_filter='GpuFp8Gemm.QuantPrologueRelayBitwise:GpuFp8Gemm.QuantPrologueBitwise:GpuFp8Gemm.StreamEntryTriggerChainBitwise';
tests_model_relay|$R=4 \$b/test_gpu_model --gtest_filter='V4GpuForward.*:V41GpuForward.*:GpuPdlModel.*';
ab_relay_v4|OUT=\$OUT/ab_relay_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: r2:$R=2 r4:$R=4 r8:$R=8' 3;
ab_relay_v41|OUT=\$OUT/ab_relay_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: r2:$R=2 r4:$R=4 r8:$R=8' 2 --family v41;
ab_share_v4|OUT=\$OUT/ab_share_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: s0:$R=4,$S=0 s2:$R=4,$S=2' 2;
stamps_relay|mkdir -p \$OUT/stamps_relay && $R=4 bash tools/gpu/fp8_step_stamps.sh \$b \$OUT/stamps_relay;
stamps_base|mkdir -p \$OUT/stamps_base && bash tools/gpu/fp8_step_stamps.sh \$b \$OUT/stamps_base"
exec bash "$(dirname "$0")/../device_call.sh"
