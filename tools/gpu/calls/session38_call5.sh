#!/usr/bin/env bash
# Session 38, fifth call: the index path's new defaults (DEEPINFER_INDEX_INPUTS_EARLY on: the head weights on the
# side branch, V4's index compressor on a branch of its own; DEEPINFER_INDEX_QUERY=lead). Every gpu test of test_gpu
# and test_gpu_model at the defaults (device_call.sh's suites), then a same-call A/B of the defaults against the
# session's starting schedule (early off, the query first), 2 repeats each model.
# (A record of the run: DEEPINFER_INDEX_QUERY=lead and DEEPINFER_INDEX_KEYS_BRANCH were removed or folded in after it.)
#   usage (GPU machine, repo root; .gpubin: test_gpu, test_gpu_model, v4_decode): bash tools/gpu/calls/session38_call5.sh
set -uo pipefail
OLD=DEEPINFER_INDEX_INPUTS_EARLY=0,DEEPINFER_INDEX_QUERY=first
export EXTRA_GPU0="ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'old:$OLD new:' 2;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV 'old:$OLD new:' 2 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
