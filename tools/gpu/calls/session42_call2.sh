#!/usr/bin/env bash
# Session 42, fourth call: two launch edges of the batch-1 chain that were plain launches, each behind a switch
# (default off), with their tests and the A/B on both models.
#  - DEEPINFER_ATTENTION_PDL=1: the attention core's split and merge launched with PDL (both wait before any global
#    access; the V4 / V4.1 selects let the split in at their start). Run 220's timeline: the split 0.45-0.61 us after
#    its predecessor's end on every layer, the merge 0.45-0.55 us after the split.
#  - DEEPINFER_MOE_W2_PDL=1: the routed w2 launched with PDL behind its w1|w3, which lets it in right after its own
#    wait; w2's producer streams at once (session 16's early-w2 diagnostic: V4 -0.4 %).
#  - The default path's cost of the added instructions: BIN A/B of v4_decode_base (9f6051e, the build of runs 219-221)
#    against this build with both switches off.
#   usage (GPU machine, repo root; .gpubin: test_gpu, test_gpu_model, v4_decode, v4_decode_base):
#     bash tools/gpu/calls/session42_call2.sh (~6 min)
set -uo pipefail
export SKIP_SUITES=1
A=DEEPINFER_ATTENTION_PDL=1 W=DEEPINFER_MOE_W2_PDL=1
export EXTRA_GPU0="tests_kernels|$A \$b/test_gpu --gtest_filter='GpuSinkAttention.*:GpuPdl.*';
tests_switches|\$b/test_gpu_model --gtest_filter='GpuAttentionPdl.*:GpuMoeW2Pdl.*';
tests_model_on|$A $W \$b/test_gpu_model --gtest_filter='V4GpuForward.*:V41GpuForward.*:GpuPdlModel.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: attn:$A w2:$W both:$A,$W' 4;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: attn:$A w2:$W both:$A,$W' 3 --family v41;
ab_bin|OUT=\$OUT/ab_bin bash tools/gpu/decode_switch_ab.sh \$b BIN 'v4_decode_base v4_decode' 3;
trace_both|$A $W OUT=\$OUT/trace_both bash tools/gpu/trace_decode.sh 1 16"
exec bash "$(dirname "$0")/../device_call.sh"
