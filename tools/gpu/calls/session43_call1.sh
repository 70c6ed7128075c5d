#!/usr/bin/env bash
# Session 43's experiments (written in session 43, which got no device time: the workplace paused its loans before
# the first call ran). Four changes on the MoE's batch-1 chain, each behind a switch (default off), measured
# apart (the overlap also with the routed PDL), with their tests:
#  - DEEPINFER_FP4_HALF_OVERLAP=1: the MXFP4 stream's consume loop with a stage's two halves overlapped
#    (stream_fp4_wgmma.cuh consume_stage_overlapped): each batch of 4 steps is folded after the next batch is issued,
#    so one wgmma group is in flight while the next batch widens; the half-by-half loop waits for its second group
#    before it widens the next half. Same folds in the same order: the same bits. The default kernel's SASS is
#    unchanged (the form is its own instantiation). The fp4 stamps (consumer busy per stage) with it off and on.
#  - DEEPINFER_FP4_WARPGROUPS=4: the same stream with four consumer warpgroups (16 warps, one batch per half stage
#    each: 4 warps per scheduler instead of 2). Other bits than two (the partials' grouping): its kernel test bounds
#    it against the CPU and the two-warpgroup form; the forward tests run with it on.
#  - DEEPINFER_MOE_ROUTED_PDL=1: the routed w1|w3 launched with PDL behind the fused routing (its blocks resident
#    while the routing finishes); the risk is the shared expert's side-stream launches finding no SM. A trace with it
#    on shows which.
#  - DEEPINFER_MOE_SHARED_W2_LATE=1: the shared expert's w2 deferred behind the routed experts (run 222's timeline:
#    it runs beside the routed w2, which ends 16 us after w1|w3 against ~10 us alone). The same bits either way.
# This call: the kernel tests, the ENV A/Bs on both models, the fp4 stamps in the step and the routed launches alone
# (roofline --fp4-phases: consumer busy per stage without the step's neighbours), per consumer form;
# session43_call2.sh: the model tests and the traces (one call is at most 10 minutes).
#   usage (GPU machine, repo root; .gpubin: test_gpu, test_gpu_model, v4_decode, roofline of this commit or later):
#     bash tools/gpu/calls/session43_call1.sh (~8 min)
set -uo pipefail
export SKIP_SUITES=1
O=DEEPINFER_FP4_HALF_OVERLAP=1 R=DEEPINFER_MOE_ROUTED_PDL=1 W=DEEPINFER_FP4_WARPGROUPS=4
L=DEEPINFER_MOE_SHARED_W2_LATE=1
export EXTRA_GPU0="tests_fp4|\$b/test_gpu --gtest_filter='GpuStreamFp4Wgmma.*:StreamFp4Wgmma.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: ovl:$O wg4:$W rpdl:$R ovl_rpdl:$O,$R w2late:$L' 3;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: ovl:$O wg4:$W rpdl:$R ovl_rpdl:$O,$R w2late:$L' 2 --family v41;
stamps_v4|\$b/v4_decode --quick --pdl on --fp4-stamps --out \$OUT/stamps_v4.json;
stamps_v4_ovl|$O \$b/v4_decode --quick --pdl on --fp4-stamps --out \$OUT/stamps_v4_ovl.json;
stamps_v4_wg4|$W \$b/v4_decode --quick --pdl on --fp4-stamps --out \$OUT/stamps_v4_wg4.json;
stamps_v41|\$b/v4_decode --quick --pdl on --fp4-stamps --family v41 --out \$OUT/stamps_v41.json;
stamps_v41_ovl|$O \$b/v4_decode --quick --pdl on --fp4-stamps --family v41 --out \$OUT/stamps_v41_ovl.json;
stamps_v41_wg4|$W \$b/v4_decode --quick --pdl on --fp4-stamps --family v41 --out \$OUT/stamps_v41_wg4.json;
phases|\$b/roofline --fp4-phases --out \$OUT/fp4_phases.json;
phases_ovl|$O \$b/roofline --fp4-phases --out \$OUT/fp4_phases_ovl.json;
phases_wg4|$W \$b/roofline --fp4-phases --out \$OUT/fp4_phases_wg4.json"
exec bash "$(dirname "$0")/../device_call.sh"
