#!/usr/bin/env bash
# Written in session 52: session51_call3.sh's measurement plus helper-151's prefill patch and fresh batch-1 traces.
#   v4_decode_spread   bench/gpu/attempts/session51_lagged_site_spread_cluster.patch (helper-150: V4.1's lagged
#                      pre-site as a cluster of 5 blocks a row; ~1-2.5 % of V4.1 batch 1 expected;
#                      DEEPINFER_HC_LAGGED_SITE=single is its off switch)
#   v4_decode_fp4s     bench/gpu/attempts/session51_fp4_scale_branch_free.patch (helper-148; ~30 ns a kernel)
#   v4_decode_all      both (and the prefill patch, which decode does not run)
#   roofline_prefill16 bench/gpu/attempts/session51_prefill_chunks_on_16_rows.patch (helper-151: MoE prefill chunks
#                      on 16-row bounds, ~2.5-3 % of the 16-token steps expected), against roofline (the base)
#   test_gpu / test_gpu_model carry all three patches.
#   pack (here; ~25 min on 2 cores from a built build-cuda): A=bench/gpu/attempts; ALL=1 tools/gpu/pack_patch_ab.sh \
#     spread=$A/session51_lagged_site_spread_cluster.patch fp4s=$A/session51_fp4_scale_branch_free.patch \
#     prefill16:roofline=$A/session51_prefill_chunks_on_16_rows.patch
#   (run 242 on an H200: the steps above; a `;` inside a step splits it, so the prefill greps did not run there)
#   usage (GPU machine, repo root): PART=a bash tools/gpu/calls/session52_call1.sh (~5 min: the decode BIN A/B at
#          batches 1 / 8, 3 repeats, both models; the prefill A/B, 3 alternating repeats; batch-1 traces of the base,
#          V4 16 layers and V4.1 10; QUICK=1: batch 1, 2 repeats, no traces), then PART=b (~4 min: the tests: the
#          ones run 240 left unrun on the landed code, and the three patches' tests).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
part=${PART:-a}
if [ "$part" = a ]; then
  steps="$(bin_ab_models ab_s52 "v4_decode v4_decode_spread v4_decode_fp4s v4_decode_all")"
  P="--prefill-only --prefill-16k --quick"
  for i in 1 2 3; do
    steps+=";
prefill_base$i|\$b/roofline $P --out \$OUT/prefill_base$i.json > \$OUT/prefill_base$i.log 2>&1 && grep -E 'prefill_v13 |(v13)' \$OUT/prefill_base$i.log | head -8;
prefill_p16_$i|\$b/roofline_prefill16 $P --out \$OUT/prefill_p16_$i.json > \$OUT/prefill_p16_$i.log 2>&1 && grep -E 'prefill_v13 |(v13)' \$OUT/prefill_p16_$i.log | head -8"
  done
  if [ "${QUICK:-0}" != 1 ]; then
    steps+=";
trace_b1_v4|OUT=\$OUT/trace_b1_v4 bash tools/gpu/trace_decode.sh 1 16;
trace_b1_v41|OUT=\$OUT/trace_b1_v41 bash tools/gpu/trace_decode.sh 1 10 --family v41"
  fi
else
  steps="$(stream_site_tests_steps ':GpuMoePrefillGemm.*')"
fi
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
