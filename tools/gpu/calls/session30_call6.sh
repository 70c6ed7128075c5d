#!/usr/bin/env bash
# Session 30, sixth call (v4_decode of an experiment build on 443dc0f, not committed; the patch is
# bench/gpu/attempts/session30_ring_release_after_math.patch): DEEPINFER_RING_FENCE 0 = each consumer warp fences and
# releases a stage right after loading its fragments (the fix), 4 = the same fence + release after the stage's math,
# where the loads have certainly returned (the fragments were used), so the fence's MEMBAR has nothing left to drain.
# Same-run A/B on both models (runs 169-170: the fence costs batch 1 ~1-1.7 %, batch 8 1.5-5 %).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session30_call6.sh
set -uo pipefail
export SKIP_SUITES=1 EXTRA_GPU0="ab_v4|OUT=\$OUT/v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_RING_FENCE '0 4' 3;
ab_v41|OUT=\$OUT/v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_RING_FENCE '0 4' 3 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
