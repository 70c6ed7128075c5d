#!/usr/bin/env bash
# Session 47, written for a later session: the lane probe's committed form (bench/gpu/lane_probe.cu; NOTES "Session 47:
# the lane probe"). Runs 231-234 found that a stream's bulk copies issued before its PDL wait do not land while the
# latency kernel before it runs; this form separates the latency kernel's tight polls (LSync: spin, spin+sleep, no
# barrier) from PDL itself, and bulk copies from an L2 prefetch (GPrefetch), with shared SMs and with lanes.
#   .gpubin/bins.tar.xz: lane_probe of this commit or later (BUILD_DIR=build-cuda PACK_ONLY="lane_probe"
#   bash tools/gpu/pack_prebuilt.sh, ~11 MB).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session47_call3.sh   (~1 min; the probe itself ~5 s; the
#   step is named *tail* so that device_call.sh prints its table whole)
#   Reading (`ld<w`: the share of stream blocks whose first stage landed before their wait):
#   - ~0 even in the `sleep only` rows (a latency kernel with no memory traffic) but near 1 in the `flags` rows (two
#     streams, flag waits, no griddepcontrol.wait) -> PDL holds the early copies: the overlap needs kernels that wait
#     on flags in resident blocks;
#   - near 1 with `no barrier` / `sleep only` and ~0 with `spin` -> the polls hold them back: A/B
#     bench/gpu/attempts/session47_spin_backoff.patch (a sleep between the site tails', routing's and selects' polls);
#   - ~0 everywhere -> neither (look at HBM / L2 instead).
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="lane_tail|timeout 120 stdbuf -oL \$b/lane_probe --out \$OUT/lane.json"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
