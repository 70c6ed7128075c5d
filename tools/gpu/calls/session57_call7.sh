#!/usr/bin/env bash
# Written in session 57, not run: the decode BIN A/B of main against REF4's bf16 rounding of the expert GEMMs
# (bench/gpu/attempts/session57_ref4_expert_rounding.patch): the step time (expected flat: a few conversions in
# the SwiGLU and the combines) and the logits digests (expected to move: other bits). Batches 1 and 8, V4 and V4.1.
#   pack (here): as session57_call6.sh (one pack serves both calls)
#   usage (GPU machine, repo root): bash tools/gpu/calls/session57_call7.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
EXTRA_GPU0="$(bin_ab_models ref4 "v4_decode v4_decode_ref4")"
export EXTRA_GPU0
clock_logged
