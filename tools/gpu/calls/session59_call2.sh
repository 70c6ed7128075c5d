#!/usr/bin/env bash
# Session 59: on an H200 only (a fresh start mostly brings an H100, whose suites ran in session 58): every single-GPU
# `gpu` test at the landed code (as session58_call1.sh), then the decode step, V4 and V4.1, batches 1 and 8, 4 repeats
# (session59_call1.sh's decode steps). On any other card it prints the card and stops, so a probe costs only the start.
#   pack (here): as session59_call1.sh (8c089db's engine code)
#   usage (GPU machine, repo root): bash tools/gpu/calls/session59_call2.sh
set -uo pipefail
card="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
echo "card: $card"
case "$card" in
  *H200*) ;;
  *) echo "not an H200: nothing run"; exit 0 ;;
esac
unset SKIP_SUITES EXTRA_GPU1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="$(bin_ab_models ab_dec "v4_decode" 4)"
exec bash "$(dirname "$0")/../device_call.sh"
