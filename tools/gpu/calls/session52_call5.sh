#!/usr/bin/env bash
# Written in session 52: batch-1 CUPTI traces of what the session landed (ce002ae's v4_decode, the only binary in
# .gpubin: the held-split merge measured 2-3x below its model in run 246; where does the tail between the attention
# split's end and wo_a's start go now?). V4 16 layers, V4.1 10 (~1 min).
#   pack: ninja -C build-cuda v4_decode at ce002ae; strip; tar | xz into .gpubin/bins.tar.xz.
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="trace_b1_v4|OUT=\$OUT/trace_b1_v4 bash tools/gpu/trace_decode.sh 1 16;
trace_b1_v41|OUT=\$OUT/trace_b1_v41 bash tools/gpu/trace_decode.sh 1 10 --family v41"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
