#!/usr/bin/env bash
# Written in session 57: what v13's fp32 y stores cost under sustained load (the diagnostic
# bench/gpu/attempts/session57_prefill_v13_skip_store.patch: DEEPINFER_PREFILL_SKIP_STORE=1 returns from
# store_item_lean before its stores; wrong output, timing only). 3 rounds of `--prefill-only --prefill-16k --quick
# --sustained` (the default 1000 ms windows), stores on / off alternating, clock log beside the call. V4.1 runs v9
# (untouched): its rows are the control.
#   pack (here): the patch applied, `ninja -C build-cuda roofline`, PACK_ONLY="roofline" BUILD_DIR=build-cuda bash
#     tools/gpu/pack_prebuilt.sh, the patch reverted
#   usage (GPU machine, repo root): bash tools/gpu/calls/session57_call2.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
steps="$(env_rounds_steps store DEEPINFER_PREFILL_SKIP_STORE "0 1" 3 \
  "--prefill-only --prefill-16k --quick --sustained" 90)"
export EXTRA_GPU0="$steps"
clock_logged
