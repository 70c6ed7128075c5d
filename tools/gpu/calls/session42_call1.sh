#!/usr/bin/env bash
# Session 42, third call: session40_call1.sh without the relay probe (session41_call1.sh ran it) and without the
# default forward tests (session41_call2.sh ran them): the index finish by tickets (tests, tests with it on, A/B,
# timeline) and the branch GEMVs' spare SMs for multi-row launches (A/B on both models).
set -uo pipefail
export SKIP_SUITES=1
T=DEEPINFER_INDEX_FINISH_TICKET=1 M=DEEPINFER_BRANCH_GEMV_SPARE_SMS_MULTIROW
export EXTRA_GPU0="tests_new|\$b/test_gpu_model --gtest_filter='GpuCompressorIndexer.*:GpuIndexFinishTicket.*:GpuBranchGemvGrid.*';
tests_on|$T \$b/test_gpu_model --gtest_filter='V4GpuForward.*:GpuIndexInputsEarly.*:GpuCompressorBranch.V4*:GpuPdlModel.V4*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: ticket:$T' 4;
ab_multirow_v4|OUT=\$OUT/ab_multirow_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: m16:$M=16 m32:$M=32' 3;
ab_multirow_v41|OUT=\$OUT/ab_multirow_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: m16:$M=16 m32:$M=32' 2 --family v41;
trace_v4|$T OUT=\$OUT/trace_v4 bash tools/gpu/trace_decode.sh 1 16"
exec bash "$(dirname "$0")/../device_call.sh"
