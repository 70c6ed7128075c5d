#!/usr/bin/env bash
# Session 35, last call: the selector form as the default (DEEPINFER_CSA2_SELECTOR unset = block). Every V4.1 test of
# test_gpu_model at the defaults (the model's forwards and step-bitwise checks now run the selector form; the CSA2
# select tests pin each form themselves), the V4.1 select stamps at the default (the record's grid / entries fields
# now from score block 0), and a same-call A/B of the switch (2 repeats).
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode): bash tools/gpu/calls/session35_call5.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="v41_tests|\$b/test_gpu_model --gtest_filter='*V41*:GpuCsa2*';
sel_default|\$b/v4_decode --quick --pdl on --family v41 --select-stamps --out \$OUT/sel_default.json;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_CSA2_SELECTOR 'ticket block' 2 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
