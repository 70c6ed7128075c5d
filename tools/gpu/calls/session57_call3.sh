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
args="--prefill-only --prefill-16k --quick --sustained --sustain-ms 300"
steps="$(env_rounds_steps c DEEPINFER_PREFILL_STAGGER "0 2000 4000 8000" 3 "$args" 60 -)"
export EXTRA_GPU0="$steps"
clock_logged
