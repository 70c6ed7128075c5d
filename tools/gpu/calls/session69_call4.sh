#!/usr/bin/env bash
# Session 69's fourth call (not run in session 69: its device time ran out). Two patches, applied in this order:
#   bench/gpu/attempts/session69_selector_pdl.patch: the decode select's PDL launches (index_select_bins.cuh
#     selector_launch, DEEPINFER_INDEX_PDL=chain|select|off, indexer_gpu.h). Runs 307-308: the selector's rehearsal,
#     started with the score blocks, set its ticket (8.3-10.8 us after their start against the ticket form's 4.7);
#     with PDL the selector rehearses while the query finish (select) or the projection and the finish (chain) run.
#     It also stamps the rehearsal's end ("rehearsed X us" in the select stamps).
#   bench/gpu/attempts/session69_page_fastdiv.patch (on top of the first): pool_row's division by the run-time page
#     size as a FastDiv carried in SelectRows (V4's selector kernel 118.5 -> 102.9 KB of SASS, the ticket form's
#     110.8 -> 99.3 KB, CSA2's 3-8 % smaller): less code for the rehearsal and the cold selects to fetch.
#   pack (here, sha256 in bench/results/gpu_h100_run306_COMMAND.md): v4_decode = the first patch alone,
#   v4_decode_fd and test_gpu_model = both; built with ninja in build-cuda, then PACK_ONLY="test_gpu_model v4_decode"
#   EXTRA_BINS="<both patches' v4_decode as v4_decode_fd>" BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh.
#   1. the select / indexer tests (with GpuDecodeFused.SelectorAfterQueryFinish: the select behind the finish, its
#      queries poisoned before each run, under every setting), the PDL step tests, the V4 / V4.1 forwards, on both
#      patches;
#   2. decode chain / select / off on the first patch (off = the launches before it), V4 and V4.1, batches 1 and 8,
#      2 repeats (both orders), digests;
#   3. decode v4_decode against v4_decode_fd (both at chain), the same way;
#   4. the select stamps: chain and off of the first patch, chain of both, V4 and V4.1 at batch 1.
#   usage (GPU machine, repo root): [SKIP_STAMPS=1] bash tools/gpu/calls/session69_call4.sh   (~8 min; ~6.5 without 4)
set -uo pipefail
source "$(dirname "$0")/steps.sh"
call_setup /tmp/deepinfer-bin4
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
tests_run tests.log $b/test_gpu_model "$INDEX_SELECT_TESTS:V4GpuForward.*:V41GpuForward.*:GpuPdl*:GpuAttentionPdl.*"
grep -E 'GPU_CHECK .*selector_after_finish' "$out/tests.log" | cut -c1-160 | head -20
decode_ab_models $b ENV "chain: select:DEEPINFER_INDEX_PDL=select off:DEEPINFER_INDEX_PDL=off" 2 1,8
out=$out/fd decode_ab_models $b BIN "v4_decode v4_decode_fd" 2 1,8
[ "${SKIP_STAMPS:-0}" = 1 ] && exit 0  # a shorter call: tests and the A/Bs only
for fam in v4 v41; do
  select_stamps_run chain_$fam $b/v4_decode $fam
  select_stamps_run off_$fam $b/v4_decode $fam DEEPINFER_INDEX_PDL=off
  select_stamps_run fd_$fam $b/v4_decode_fd $fam
done
