#!/usr/bin/env bash
# Written in session 57: the y store's form (bench/gpu/attempts/session57_prefill_v13_store_forms.patch:
# DEEPINFER_PREFILL_SKIP_STORE 0 = store_item_lean's 4-byte stores, 1 = none, 2 = the same bytes of the same region as
# 16-byte stores, 8 tokens x 64 bytes a warp instruction, values permuted: wrong output, timing only). 2 rounds of
# `--prefill-only --prefill-16k --quick --sustained --sustain-ms 300`, clock log beside the call.
#   pack (here): the patch applied, `ninja -C build-cuda roofline`, PACK_ONLY="roofline" BUILD_DIR=build-cuda bash
#     tools/gpu/pack_prebuilt.sh, the patch reverted
#   usage (GPU machine, repo root): bash tools/gpu/calls/session57_call4.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
args="--prefill-only --prefill-16k --quick --sustained --sustain-ms 300"
steps="$(env_rounds_steps form DEEPINFER_PREFILL_SKIP_STORE "0 1 2" 2 "$args")"
export EXTRA_GPU0="$steps"
clock_logged
