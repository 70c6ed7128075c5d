#!/usr/bin/env bash
# Session 11's second device call (one H200; prebuilt binaries of 4ea1a49 in .gpubin), through device_call.sh:
# the MoE / PDL tests with the routing counters zeroed by a kernel; same-call A/B of DEEPINFER_MOE_TICKET (memset vs
# kernel) and DEEPINFER_MOE_SHARED_FIRST (0 vs 1) on 16 V4-Flash layers; the batch-1 timelines of both; ncu stall
# samples of the routing kernel and the indexer's decode select.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session11_call2.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='moe_pdl_tests|$b/test_gpu_model --gtest_filter="GpuMoe.*:GpuPdl*:V4GpuForward.*:GpuEngine.BatchInvariant*";
ab_ticket|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_TICKET "memset kernel" 3;
ab_shared|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MOE_SHARED_FIRST "0 1" 3;
trace_tail|bash tools/gpu/trace_decode.sh 1 16 | head -30;
trace_shared_tail|mkdir -p $OUT/shared1 && DEEPINFER_MOE_SHARED_FIRST=1 OUT=$OUT/shared1 bash tools/gpu/trace_decode.sh 1 16 | head -30;
ncu_route_tail|NCU_EXTRA="--profile-from-start off --graph-profiling node" bash tools/gpu/ncu_sass_stalls.sh route decode_route_kernel 2 -- $b/v4_decode --quick --layers 4 --profile-step 1 && head -60 $OUT/ncu_sass_route.txt;
ncu_select_tail|NCU_EXTRA="--profile-from-start off --graph-profiling node" bash tools/gpu/ncu_sass_stalls.sh select index_decode_select 0 -- $b/v4_decode --quick --layers 4 --profile-step 1 && head -60 $OUT/ncu_sass_select.txt'
exec bash "$(dirname "$0")/../device_call.sh"
