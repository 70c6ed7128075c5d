#!/usr/bin/env bash
# First device call of session 17 (no device was lent in session 16; binaries of session 16's last code): every
# one-GPU suite at the defaults (they include session 16's GpuMoe.W2EarlyLaunchSameBits and
# GpuStreamFp4Wgmma.PipelinedSameBits), then the routing's routed-phase split (session 15's compiled stamps) on 16
# V4-Flash and 10 V4.1-Flash layers. ~420 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session17_call1.sh
set -uo pipefail
export EXTRA_GPU0='stamps_split_v4_tail|$b/v4_decode --quick --pdl on --route-stamps --out $OUT/rs_split_v4.json;
stamps_split_v41_tail|$b/v4_decode --quick --family v41 --pdl on --route-stamps --out $OUT/rs_split_v41.json'
exec bash "$(dirname "$0")/../device_call.sh"
