#!/usr/bin/env bash
# Session 28, third device call (run 157): a sweep of V4.1's schedule switches at the session's defaults. Most were
# tuned on V4 (or on V4.1 before sessions 23-27 moved its critical path); each A/B puts the default first, 2 runs a
# value, alternating (decode_switch_ab.sh: `v4_decode --quick --pdl on --family v41`). No code change: a switch that
# wins here is a per-family default to make and test.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session28_call3.sh
set -uo pipefail
ab() { echo "ab_$1_v41|OUT=\$OUT/v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_$1 \"$2\" 2 --family v41"; }
steps=(
  "$(ab V41_MIX_BRANCH '1 0')"
  "$(ab COMPRESSOR_BRANCH '1 0')"
  "$(ab CSA2_SCORE_SHAPE 'auto 64x2 64x1 32x1')"
  "$(ab INDEX_QUERY 'first before_join')"
  "$(ab STREAM_TRIGGER 'entry last')"
  "$(ab STREAM_STAGES '2 3 4')"
  "$(ab HC_SITE_TAIL 'spread single')"
  "$(ab BRANCH_GEMV_BLOCKS_PER_SM '1 2')"
)
EXTRA_GPU0=$(printf '%s;\n' "${steps[@]}")
export SKIP_SUITES=1 EXTRA_GPU0="${EXTRA_GPU0%;*}"
exec bash "$(dirname "$0")/../device_call.sh"
