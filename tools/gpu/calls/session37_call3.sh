#!/usr/bin/env bash
# Ran as run 200 (bench/results/gpu_h200_run198-208_COMMAND.md); the switch it measures lost and was removed after it:
# rerun it with the binaries of commit 72a9dc1.
# Session 37, third call (prepared in session 36, not run): V4.1's grouped MXFP4 prefill with smaller chunks.
# At 16384 tokens V4.1 has ~256 rows per expert, which v9 cuts into two chunks of ~128 (NT 8): its act-32 clean loop
# then promotes one partial at a time, every 32-wide K block's wgmma waited for before its promotion. Chunks of <= 96
# rows (NT <= 6) take the loop with two partials (block j + 1's wgmma in flight while block j is promoted), at the
# price of each expanded weight tile serving fewer tokens. DEEPINFER_PREFILL_ACT32_CHUNK=64|96|128|192 (default 192)
# changes only the chunk list (build_chunks_kernel); the kernels are those of today.
# 1. Tests: GpuMoePrefillGemm.V41Groups and .WideGroups (the new "chunks<=N bitwise-vs-192" lines: 0 mismatches).
# 2. `roofline --prefill-only --prefill-16k --quick` once per value (192 first: the same run's baseline), V4.1 w13 / w2
#    rows of v9 / v13 (act block 32: v13 runs v9's kernel) against the run's dense FP8 rate.
#   usage (GPU machine, repo root; .gpubin: test_gpu, roofline): bash tools/gpu/calls/session37_call3.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="prefill_tests|\$b/test_gpu --gtest_filter='GpuMoePrefillGemm.V41Groups:GpuMoePrefillGemm.WideGroups';
chunk_192|DEEPINFER_PREFILL_ACT32_CHUNK=192 timeout 300 \$b/roofline --prefill-only --prefill-16k --quick --out \$OUT/prefill_chunk192.json;
chunk_96|DEEPINFER_PREFILL_ACT32_CHUNK=96 timeout 300 \$b/roofline --prefill-only --prefill-16k --quick --out \$OUT/prefill_chunk96.json;
chunk_64|DEEPINFER_PREFILL_ACT32_CHUNK=64 timeout 300 \$b/roofline --prefill-only --prefill-16k --quick --out \$OUT/prefill_chunk64.json"
exec bash "$(dirname "$0")/../device_call.sh"
