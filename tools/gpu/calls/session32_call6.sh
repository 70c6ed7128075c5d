#!/usr/bin/env bash
# Session 32, sixth call (not run in session 32: no device time left): run 182's lead confirmed or not: the dense FP8
# products' ring depth 2 (default) vs 3 (DEEPINFER_STREAM_STAGES; run 182: batch 1 -0.5 % V4 / -0.6 % V4.1, V4.1
# batch 8 +1.2 %, two repeats each), and 3 at one row only (DEEPINFER_STREAM_STAGES_ONE_ROW=3, 2 above: batch 8 keeps
# the default), four repeats on both models.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session32_call6.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="stages_v4|OUT=\$OUT/stages_v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_STREAM_STAGES '2 3' 4;
stages_v41|OUT=\$OUT/stages_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_STREAM_STAGES '2 3' 4 --family v41;
one_row_v4|OUT=\$OUT/one_row_v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_STREAM_STAGES_ONE_ROW '0 3' 4;
one_row_v41|OUT=\$OUT/one_row_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_STREAM_STAGES_ONE_ROW '0 3' 4 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
