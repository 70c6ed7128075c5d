#!/usr/bin/env bash
# Session 45, written after its device time was spent (not run in session 45): the two follow-ups of runs 224-227.
#  1. The routed PDL's per-model row threshold (MoeGpu::routed_pdl_rows, V4.1 8): V4.1 at 1 / 2 / 4 / 8 / 16 rows with
#     the default, from 2 rows (DEEPINFER_MOE_ROUTED_PDL=2) and never (=0): where the gain starts (run 227: batch 1
#     +3.1 %, batch 8 -1.9 %). Plus the restructured on / off tests and both forwards at the defaults.
#  2. ncu stall samples of the default act-32 v9 prefill kernel (V4.1 w13 at 16384 tokens): where its loop waits,
#     now that the halves loop and the slot-ordered token scales lost (run 224). The regex matches ncu's demangled
#     name (`mxfp4_prefill_v9_kernel<(bool)1, (bool)0, (bool)0>`), which session44_call1.sh's did not.
#  3. DEEPINFER_FP4_JOINT_B=1 (stage_b's joint form: x's codes and scales loaded in one round, the zero fills under
#     them; the same bits): its kernel and model tests, an ENV A/B on both models, and the fp4 stamps with it off and
#     on (b_zeroed / b_codes / b_scales: run 225 had V4.1 w1|w3 at 1.32 / 3.11 / 6.45 us on an H100).
#   usage (GPU machine, repo root; .gpubin: test_gpu, test_gpu_model, v4_decode, roofline of this commit or later):
#     bash tools/gpu/calls/session45_call2.sh (~6-7 min)
set -uo pipefail
export SKIP_SUITES=1
N="NCU_EXTRA='--kernel-name-base demangled' bash tools/gpu/ncu_sass_stalls.sh"
J=DEEPINFER_FP4_JOINT_B=1
export EXTRA_GPU0="tests_kernels|\$b/test_gpu --gtest_filter='GpuStreamFp4Wgmma.*';
tests_model|\$b/test_gpu_model --gtest_filter='GpuMoeRoutedPdl.*:GpuFp4JointB.*:V41GpuForward.*:V4GpuForward.*';
ab_joint_v4|OUT=\$OUT/ab_joint_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: joint:$J' 3;
ab_joint_v41|OUT=\$OUT/ab_joint_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: joint:$J' 3 --family v41;
stamps_v4|\$b/v4_decode --quick --pdl on --fp4-stamps --out \$OUT/stamps_v4.json;
stamps_v4_joint|$J \$b/v4_decode --quick --pdl on --fp4-stamps --out \$OUT/stamps_v4_joint.json;
stamps_v41|\$b/v4_decode --quick --pdl on --fp4-stamps --family v41 --out \$OUT/stamps_v41.json;
stamps_v41_joint|$J \$b/v4_decode --quick --pdl on --fp4-stamps --family v41 --out \$OUT/stamps_v41_joint.json;
ab_v41_rows|OUT=\$OUT/ab_v41_rows bash tools/gpu/decode_switch_ab.sh \$b ENV 'model: from2:DEEPINFER_MOE_ROUTED_PDL=2 never:DEEPINFER_MOE_ROUTED_PDL=0' 2 --family v41 --batches 1,2,4,8,16;
stalls_act32|$N act32_default 'mxfp4_prefill_v9_kernel<\\(bool\\)1' 0 -- \$b/roofline --prefill-only --prefill-16k --quick --out /tmp/stalls_act32.json"
exec bash "$(dirname "$0")/../device_call.sh"
