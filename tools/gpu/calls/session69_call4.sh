#!/usr/bin/env bash
# Session 69's fourth call (not run in session 69: its device time ran out): the decode select's PDL launches
# (bench/gpu/attempts/session69_selector_pdl.patch: index_select_bins.cuh selector_launch, DEEPINFER_INDEX_PDL=
# chain|select|off, indexer_gpu.h). Runs 307-308: the selector's rehearsal, started with the score blocks, set its
# ticket (8.3-10.8 us after the score blocks' start against the ticket form's 4.7); with PDL the selector rehearses
# while the query finish (select) or the query projection and the finish (chain) still run.
#   pack (here, sha256 in COMMAND.md): the patch applied to HEAD (bf490140 or a later commit with the same engine),
#   PACK_ONLY="test_gpu_model v4_decode" BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh (~14 MB).
#   1. the select / indexer tests (with the patch's GpuDecodeFused.SelectorAfterQueryFinish: the select behind the
#      finish, its queries poisoned before each run, under every setting), the PDL step tests, the V4 / V4.1
#      forwards;
#   2. decode chain / select / off (off = the launches before the patch), V4 and V4.1, batches 1 and 8, 2 repeats
#      (both orders), digests;
#   3. the select stamps of chain and off, V4 and V4.1 at batch 1.
#   usage (GPU machine, repo root): [SKIP_STAMPS=1] bash tools/gpu/calls/session69_call4.sh   (~5 min; ~4 without 3)
set -uo pipefail
source "$(dirname "$0")/steps.sh"
call_setup /tmp/deepinfer-bin4
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
tests_run tests.log $b/test_gpu_model "$INDEX_SELECT_TESTS:V4GpuForward.*:V41GpuForward.*:GpuPdl*:GpuAttentionPdl.*"
grep -E 'GPU_CHECK .*selector_after_finish' "$out/tests.log" | cut -c1-160 | head -20
decode_ab_models $b ENV "chain: select:DEEPINFER_INDEX_PDL=select off:DEEPINFER_INDEX_PDL=off" 2 1,8
[ "${SKIP_STAMPS:-0}" = 1 ] && exit 0  # a short call: tests and the A/B only
for arm in chain off; do
  for fam in v4 v41; do select_stamps_run ${arm}_$fam $b/v4_decode $fam DEEPINFER_INDEX_PDL=$arm; done
done
