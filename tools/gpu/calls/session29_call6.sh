#!/usr/bin/env bash
# Session 29, sixth call (test_gpu_model only): GpuMoe.DecodeV8InvariantRunToRunFullWidth (run 163: one shared-expert
# w2 item differs between replays, hash layer, side stream only) five times each under switches that change what
# could race: the default, PDL off, the weights' L2 evict_first off, dense rings of 4 stages.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session29_call6.sh
set -uo pipefail
t='timeout 100 $b/test_gpu_model --gtest_filter=GpuMoe.DecodeV8InvariantRunToRunFullWidth --gtest_repeat=5'
g='grep -hE "mismatches=[1-9]|^\[  (PASSED|FAILED) " '
export SKIP_SUITES=1 EXTRA_GPU0="default|$t > \$OUT/default.log 2>&1 || true && $g \$OUT/default.log;
pdl0|DEEPINFER_PDL=0 $t > \$OUT/pdl0.log 2>&1 || true && $g \$OUT/pdl0.log;
evict0|DEEPINFER_WEIGHT_L2_EVICT_FIRST=0 $t > \$OUT/evict0.log 2>&1 || true && $g \$OUT/evict0.log;
stages4|DEEPINFER_STREAM_STAGES=4 $t > \$OUT/stages4.log 2>&1 || true && $g \$OUT/stages4.log"
exec bash "$(dirname "$0")/../device_call.sh"
