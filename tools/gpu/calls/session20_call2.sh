#!/usr/bin/env bash
# Second device call of session 20 (binaries of the random-index-keys commit): why the decode select is slower in the
# step than alone, and the branch GEMV grid with the shared expert.
#   - the select's phase stamps inside the batch-1 V4 step (helper-111, `v4_decode --select-stamps`), with the
#     benchmark's assumed-context index keys zero (as every run before) and random (the new default);
#   - the GPU's clocks and power across a whole `v4_decode --quick` (tools/gpu/clock_watch.sh);
#   - A/B of the index keys (V4, V4.1) on the whole-model decode benchmark;
#   - the branch GEMV grid tests (wq_b and now the shared expert), then A/Bs: blocks per SM 0 / 1 (V4, V4.1), the
#     shared expert's grid off / on at one block per SM (V4);
#   - one traced batch-1 V4 step with one block per SM.
# No suites (the session's last call runs them). ~330 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session20_call2.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0='grid_tests_tail|timeout 200 $b/test_gpu_model --gtest_filter=GpuBranchGemvGrid.* > $OUT/grid_tests.log 2>&1 || grep -B3 -A8 Failure $OUT/grid_tests.log | head -40 && grep -E "^\[ +(OK|FAILED|PASSED) " $OUT/grid_tests.log && grep -E "GPU_CHECK.*mismatches=[1-9]" $OUT/grid_tests.log | head;
select_stamps_tail|timeout 100 $b/v4_decode --quick --pdl on --select-stamps --zero-index-keys --out $OUT/sel_zero.json > $OUT/sel_zero.log 2>&1 && timeout 100 $b/v4_decode --quick --pdl on --select-stamps --out $OUT/sel_random.json > $OUT/sel_random.log 2>&1 || tail -5 $OUT/sel_zero.log $OUT/sel_random.log && grep -hE "select stamps|all layers|alone" $OUT/sel_zero.log $OUT/sel_random.log && grep -m3 " layer " $OUT/sel_random.log;
clocks_tail|nvidia-smi --query-gpu=clocks.max.sm,clocks.max.mem,clocks.applications.graphics,power.limit --format=csv && OUT=$OUT bash tools/gpu/clock_watch.sh clocks_v4 $b/v4_decode --quick --pdl on --out $OUT/clocks_v4.json && OUT=$OUT bash tools/gpu/clock_watch.sh clocks_select $b/index_select_latency --entries 1024 --out $OUT/clocks_select.json;
ab_index_keys|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b FLAG "--zero-index-keys none" 2;
ab_index_keys_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b FLAG "--zero-index-keys none" 2 --family v41;
ab_blocks_per_sm|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM "0 1" 2;
ab_blocks_per_sm_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM "0 1" 2 --family v41;
ab_shared_grid|DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM=1 OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_BRANCH_GEMV_SHARED_EXPERT "0 1" 2;
trace_tail|DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM=1 OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true && head -12 $OUT/trace/trace_b1.txt'
exec bash "$(dirname "$0")/../device_call.sh"
