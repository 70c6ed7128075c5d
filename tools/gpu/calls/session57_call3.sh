#!/usr/bin/env bash
# Written in session 57: the block stagger experiment (bench/gpu/attempts/session57_prefill_v13_cta_stagger.patch:
# DEEPINFER_PREFILL_STAGGER < 0 holds both consumer warpgroups of every odd block -value SM cycles before their first
# item, so that half the SMs' y-store bursts fall under the other half's K loops: run 272 found the stores cost V4 w2
# 14 % and w13 7 %). Values 0 / -2000 / -4000 / -8000 alternating over 3 rounds of `--prefill-only --prefill-16k
# --quick --sustained --sustain-ms 300`, clock log beside the call.
#   pack (here): the patch applied, `ninja -C build-cuda roofline`, PACK_ONLY="roofline" BUILD_DIR=build-cuda bash
#     tools/gpu/pack_prebuilt.sh, the patch reverted
#   usage (GPU machine, repo root): bash tools/gpu/calls/session57_call3.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="" sep=""
for i in 1 2 3; do
  for v in 0 2000 4000 8000; do
    steps+="${sep}prefill_c${v}_$i|DEEPINFER_PREFILL_STAGGER=-$v timeout 60 bash tools/gpu/stamp_lines.sh \$b/roofline"
    steps+=" --prefill-only --prefill-16k --quick --sustained --sustain-ms 300 --out \$OUT/prefill_c${v}_$i.json"
    steps+=" > \$OUT/prefill_c${v}_$i.log"
    sep=$';\n'
  done
done
export EXTRA_GPU0="$steps"
clock_logged
