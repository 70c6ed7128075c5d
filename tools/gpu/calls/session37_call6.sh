#!/usr/bin/env bash
# Session 37, sixth call: where batch-invariant mode's batch-1 time goes (run 202: V4 4.44 vs 2.31 ms a step).
# tools/gpu/profile_decode.sh's ncu kernel table (each graph node alone, caches flushed: a ranking, not the step's
# overlapped time) of one batch-1 V4 step of 4 layers, default and with v4_decode --batch-invariant.
#   usage (GPU machine, repo root; .gpubin: v4_decode): bash tools/gpu/calls/session37_call6.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="prof_default|NCU_TIMEOUT=240 bash tools/gpu/profile_decode.sh 1 4 v4;
prof_batch_invariant|NCU_TIMEOUT=240 bash tools/gpu/profile_decode.sh 1 4 v4 --batch-invariant"
exec bash "$(dirname "$0")/../device_call.sh"
