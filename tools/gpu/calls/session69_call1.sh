#!/usr/bin/env bash
# Session 69 (session 68 call 3 without v4_decode_base: the working tree with that pack was over the 64 MiB limit), meant for an H200 (the last H200 decode headline is run 284), any card otherwise:
#   1. the select / indexer tests and the V4 / V4.1 forwards on the bf16-queries build
#      (bench/gpu/attempts/session68_bf16_queries.patch, docs/status.md lead G: the finished index queries stored as
#      bf16, staged as 16 KB a score block instead of 32 KB, fed to tile_dots through ldmatrix without the hi / lo
#      split);
#   2. decode: the engine before the tensor-core scores (v4_decode_base, 10d76343), HEAD's (v4_decode) and the
#      patched one (v4_decode_bf16q), V4 and V4.1, batches 1 and 8, 2 repeats (the arm order reversed on the
#      second), the copy-roofline column measured in the same runs, one logits digest per model and batch expected;
#   3. the select stamps of V4 and V4.1 at batch 1, HEAD's and the patched build's, with every score block's last
#      staging and first / last scores done (select_stamps.cuh kAccStagedLatest ..: which score block, and which
#      phase, sets the ticket now that the scoring is fast: bench/gpu/NOTES.md "Session 68").
#   pack (here, sha256 3d223b74): PACK_ONLY="test_gpu_model v4_decode" EXTRA_BINS="<10d76343's v4_decode as
#     v4_decode_base> <patched v4_decode as v4_decode_bf16q> <patched test_gpu_model as test_gpu_model_bf16q>"
#     BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session68_call3.sh   (~5 min)
set -uo pipefail
source "$(dirname "$0")/steps.sh"
call_setup /tmp/deepinfer-bin
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
tests_run tests_bf16q.log $b/test_gpu_model_bf16q "$INDEX_SELECT_TESTS:V4GpuForward.*:V41GpuForward.*"
decode_ab_models $b BIN "v4_decode v4_decode_bf16q" 2 1,8
for bin in v4_decode v4_decode_bf16q; do
  for fam in v4 v41; do select_stamps_run ${bin}_$fam $b/$bin $fam; done
done
