#!/usr/bin/env bash
# Written in session 55: helper-165's shorter per-item path for v13 (the ring position and the item walk carried
# over the items, the R pass by bytes: -103 instructions an NT 12 item at w2, -179 at w13, two division chains gone;
# modelled +0.8-1.2 % on V4 w2, +0.4-0.5 % on w13) against main, 8 alternating `--prefill-only --prefill-16k --quick`
# runs each (run 260: one run's spread is +-3 %), then one full (9-replay) prefill run of each. Builds:
#   roofline         main (HEAD's mxfp4_prefill.cu)
#   roofline_h165    + bench/gpu/attempts/session54_prefill_v13_slot_release_before_store.patch
#                    + bench/gpu/attempts/session55_prefill_v13_carried_walk.patch
#   pack (here): S=bench/gpu/attempts; KEEP_STAGE=/tmp/st55c tools/gpu/pack_patch_ab.sh \
#     h165:roofline=$S/session54_prefill_v13_slot_release_before_store.patch+$S/session55_prefill_v13_carried_walk.patch
#   The pack's test binaries carry both patches: session54_call2.sh on the same pack runs every single-GPU suite.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session55_call3.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(prefill_ab_steps "roofline roofline_h165" 8)"
for r in roofline roofline_h165; do
  steps+=";
full_$r|\$b/$r --prefill-only --prefill-16k --out \$OUT/full_$r.json > \$OUT/full_$r.log 2>&1 && grep -E 'prefill_v13 ' \$OUT/full_$r.log"
done
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
