#!/usr/bin/env bash
# Written in session 56: the warpgroup stagger experiment (bench/gpu/attempts/session56_prefill_v13_wg_stagger.patch:
# v13's consumer warpgroup 1 waits DEEPINFER_PREFILL_STAGGER SM cycles before its first item, so that the two
# warpgroups' per-item paths, ~2.3 K-tile times each with the tensor pipe idle while both run them at once, fall under
# each other's K loops; ~770 cycles a tile). One roofline build with the patch, the values alternating over 3 rounds of
# `--prefill-only --prefill-16k --quick --sustained --sustain-ms 300` (60 s cap a run: a stagger that stalled the ring
# would hang), clock log beside the call.
#   pack (here): the patch applied, `ninja -C build-cuda roofline`, PACK_ONLY="roofline" BUILD_DIR=build-cuda bash
#     tools/gpu/pack_prebuilt.sh, the patch reverted
#   usage (GPU machine, repo root): bash tools/gpu/calls/session56_call6.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
args="--prefill-only --prefill-16k --quick --sustained --sustain-ms 300"
steps="$(env_rounds_steps s DEEPINFER_PREFILL_STAGGER "0 800 1600 2400" 3 "$args")"
export EXTRA_GPU0="$steps"
clock_logged
