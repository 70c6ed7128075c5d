#!/usr/bin/env bash
# Last device call of session 23 (binaries of fd140d2: every default of the session: the entry trigger, the
# rewritten quantizing prologue, one globaltimer reader, the shared stamp registry, StreamGridCapBitwise's balanced
# expectation): every one-GPU `gpu` suite, then the standing batch-1 numbers beside the old trigger (V4, V4.1).
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session23_call4.sh
set -uo pipefail
export EXTRA_GPU0='standing|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_TRIGGER "last entry" 2;
standing_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_TRIGGER "last entry" 2 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
