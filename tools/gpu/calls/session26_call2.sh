#!/usr/bin/env bash
# Second device call of session 26 (binaries of main + StreamGrid::exclusive, DEEPINFER_BRANCH_GEMV_EXCLUSIVE, default
# off): the branch GEMVs (the shared expert beside the routing, wq_b beside the select) keep their SMs to themselves so
# the latency kernels beside them land on the spare SMs, away from the weight flood (run 147: an L2 hit waits behind
# its own SM's outstanding copies, 0.37 us on a quiet SM).
#   - bitwise: GpuFp8Gemm.StreamGridCapBitwise (with the exclusive grids), GpuBranchGemvGrid.* (model steps);
#   - same-call A/Bs of DEEPINFER_BRANCH_GEMV_SPARE_SMS 0 / 32 / 48 with the exclusive grid, and 0 / 32 without, V4
#     (16 layers, 4K) and V4.1 (10 layers);
#   - the routing's in-step phases (v4_decode --route-stamps), default vs exclusive with 32 spare.
# No suites. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session26_call2.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='new_tests_tail|timeout 200 $b/test_gpu --gtest_filter="GpuFp8Gemm.StreamGridCapBitwise" > $OUT/new_tests.log 2>&1 || true && timeout 250 $b/test_gpu_model --gtest_filter="GpuBranchGemvGrid.*" > $OUT/new_model_tests.log 2>&1 || true && cat $OUT/new_tests.log $OUT/new_model_tests.log | grep -cE "mismatches=[1-9]" || true && cat $OUT/new_tests.log $OUT/new_model_tests.log | grep -E "^\[  (PASSED|FAILED) |FAILED" | head -20;
ab_excl|DEEPINFER_BRANCH_GEMV_EXCLUSIVE=1 OUT=$OUT/v4x bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_SPARE_SMS "0 32 48" 3;
ab_spare|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_SPARE_SMS "0 32" 2;
ab_excl_v41|DEEPINFER_BRANCH_GEMV_EXCLUSIVE=1 OUT=$OUT/v41x bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_SPARE_SMS "0 32 48" 3 --family v41;
ab_spare_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_SPARE_SMS "0 32" 2 --family v41;
route_tail|timeout 100 $b/v4_decode --route-stamps --out $OUT/route_default.json > $OUT/route_default.log 2>&1 || true && DEEPINFER_BRANCH_GEMV_EXCLUSIVE=1 DEEPINFER_BRANCH_GEMV_SPARE_SMS=32 timeout 100 $b/v4_decode --route-stamps --out $OUT/route_excl.json > $OUT/route_excl.log 2>&1 || true && tail -4 $OUT/route_default.log && tail -4 $OUT/route_excl.log'
exec bash "$(dirname "$0")/../device_call.sh"
