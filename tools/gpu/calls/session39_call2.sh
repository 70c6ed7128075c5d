#!/usr/bin/env bash
# Session 39, second call: the code after run 215's decisions (the finish-in-select reverted, the HCA visible rows
# early on by default). Its tests; the visible rows' A/B again with 4 repeats (run 215's -0.2 % was near the noise);
# the branch GEMVs' spare SMs on both models (zero code: with V4's index inputs early the select runs beside the
# attention's wq_b, whose one block per SM leaves no quiet SM for the select's score blocks: the loads of a block
# queue behind its SM's weight flood, bench/gpu/NOTES.md "Session 26"); a timeline of the defaults.
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode): bash tools/gpu/calls/session39_call2.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="tests|\$b/test_gpu_model --gtest_filter='GpuCompressorIndexer.*:GpuVisibleRowsEarly.*:GpuIndexInputsEarly.*:V4GpuForward.*:GpuPdlModel.V4*';
ab_visible|OUT=\$OUT/ab_visible bash tools/gpu/decode_switch_ab.sh \$b ENV 'on: off:DEEPINFER_VISIBLE_ROWS_EARLY=0' 4;
ab_spare_v4|OUT=\$OUT/ab_spare_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: s16:DEEPINFER_BRANCH_GEMV_SPARE_SMS=16 s32:DEEPINFER_BRANCH_GEMV_SPARE_SMS=32 s48:DEEPINFER_BRANCH_GEMV_SPARE_SMS=48' 2;
ab_spare_v41|OUT=\$OUT/ab_spare_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: s16:DEEPINFER_BRANCH_GEMV_SPARE_SMS=16 s32:DEEPINFER_BRANCH_GEMV_SPARE_SMS=32' 2 --family v41;
trace_v4|OUT=\$OUT/trace_v4 bash tools/gpu/trace_decode.sh 1 16"
exec bash "$(dirname "$0")/../device_call.sh"
