#!/usr/bin/env bash
# Planned second device call of session 15 (same binaries as session15_call1.sh): the model suites with the bf16 GEMV
# at up to 8 rows and with the branch priority on (~200 s), then helpers 89-91's work and the priority measured with
# same-call A/Bs (16 V4-Flash / 10 V4.1-Flash layers, 4K, `v4_decode --quick --pdl on` through
# tools/gpu/decode_switch_ab.sh), the bf16 GEMV rows at m 1 / 2 / 4 / 8 against cuBLAS, the V4.1 routing stamps with
# the FFN mix after the routing (run 86: 24.61 us), the branches at the greatest stream priority (A/Bs and a V4
# timeline), and V4.1's timeline with every new switch on.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session15_call2.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='gemv_rows_8|DEEPINFER_BF16_GEMV_ROWS=8 $b/test_gpu_model --gtest_filter="V4GpuForward.*:V41GpuForward.*:GpuCompressorIndexer.*";
branch_priority|DEEPINFER_BRANCH_PRIORITY=1 $b/test_gpu_model --gtest_filter="V4GpuForward.*:V41GpuForward.*:GpuPdlModel.*:GpuSiteMixBranch.*";
bf16_gemv_rows_tail|$b/roofline --bf16-gemv-only --out $OUT/roofline_bf16_gemv.json;
ab_gemv_rows|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BF16_GEMV_ROWS "1 8" 2;
ab_gemv_rows_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BF16_GEMV_ROWS "1 8" 2 --family v41;
ab_candidates|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_CSA2_CANDIDATES "split bins" 2 --family v41;
ab_ffn_mix|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_V41_FFN_MIX "entry after_route" 2 --family v41;
ab_branch_priority|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_PRIORITY "0 1" 2;
ab_branch_priority_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_PRIORITY "0 1" 2 --family v41;
trace_v4_priority|DEEPINFER_BRANCH_PRIORITY=1 OUT=$OUT/trace_v4_priority bash tools/gpu/trace_decode.sh 1 16;
route_stamps_v41_after_route_tail|DEEPINFER_V41_FFN_MIX=after_route $b/v4_decode --quick --family v41 --pdl on --route-stamps --out $OUT/rs_v41_after_route.json;
trace_v41_all|DEEPINFER_V41_FFN_MIX=after_route DEEPINFER_CSA2_CANDIDATES=bins OUT=$OUT/trace_v41 bash tools/gpu/trace_decode.sh 1 10 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
