#!/usr/bin/env bash
# Session 47, written for session 48's first call: the lane probe (session47_call3.sh's step) and the two patches
# waiting for a measurement, in one machine start (~2.5 min; session 46 lost ~1,000 s to failed starts).
#   .gpubin/bins.tar.xz (session 47 left one built at 45a3573; `tar tJf` shows lane_probe, v4_decode,
#   v4_decode_backoff, v4_decode_audit). To rebuild it: v4_decode and lane_probe of HEAD; v4_decode_backoff with
#   bench/gpu/attempts/session47_spin_backoff.patch applied; v4_decode_audit with
#   bench/gpu/attempts/session47_audit_round_trips.patch applied (git apply, ninja -C build-cuda v4_decode, copy the
#   binary, git checkout -- src); strip them and pack the four with `xz --lzma2=preset=6,dict=192MiB`.
#  1. lane_tail: bench/gpu/lane_probe (its reading: session47_call3.sh's header).
#  2. The spin backoff (200 ns between the polls of the site tails, the routing ticket and the selects) against HEAD:
#     BIN A/B, 3 repeats, batches 1 / 8, both models; one logits digest per batch expected (a sleep changes no value).
#  3. helper-128's SASS audit against HEAD the same way (run 231 on an H100: bitwise, V4 flat, V4.1 -0.4 %).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session47_call4.sh
#   QUICK=1: the probe and both A/Bs at batch 1 on V4, 2 repeats (~1 min).
set -uo pipefail
export SKIP_SUITES=1
lane="lane_tail|timeout 120 stdbuf -oL \$b/lane_probe --out \$OUT/lane.json"
ab() {  # name, binaries, repeats, extra v4_decode args
  printf '%s|OUT=$OUT/%s bash tools/gpu/decode_switch_ab.sh $b BIN "%s" %s %s' "$1" "$1" "$2" "$3" "$4"
}
if [ "${QUICK:-0}" = 1 ]; then
  export EXTRA_GPU0="$lane;
$(ab ab_backoff_v4 'v4_decode v4_decode_backoff' 2 '--batches 1');
$(ab ab_audit_v4 'v4_decode v4_decode_audit' 2 '--batches 1')"
else
  export EXTRA_GPU0="$lane;
$(ab ab_backoff_v4 'v4_decode v4_decode_backoff' 3 '--batches 1,8');
$(ab ab_backoff_v41 'v4_decode v4_decode_backoff' 3 '--family v41 --batches 1,8');
$(ab ab_audit_v4 'v4_decode v4_decode_audit' 3 '--batches 1,8');
$(ab ab_audit_v41 'v4_decode v4_decode_audit' 3 '--family v41 --batches 1,8')"
fi
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
