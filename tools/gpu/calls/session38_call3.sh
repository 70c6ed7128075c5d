#!/usr/bin/env bash
# Session 38, third call: the index path's schedule, after run 210 (DEEPINFER_INDEX_INPUTS_EARLY=1: V4 batch 1 -1.5 %,
# V4.1 neutral). Two more forms: the indexer's wq_b before the query branch forks (DEEPINFER_INDEX_QUERY=lead: V4.1's
# index wq_b took 22.9 us beside the attention's wq_b), and V4's index compressor on a branch of its own beside the
# KV compressor (DEEPINFER_INDEX_KEYS_BRANCH=1: the KV compressor's GEMV pair no longer beside the select). Their
# schedule tests, a same-call A/B of the combinations (3 repeats) and the timelines of the full form.
# (A record of the run: DEEPINFER_INDEX_QUERY=lead and DEEPINFER_INDEX_KEYS_BRANCH were removed or folded in after it.)
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode): bash tools/gpu/calls/session38_call3.sh
set -uo pipefail
export SKIP_SUITES=1
E=DEEPINFER_INDEX_INPUTS_EARLY=1 L=DEEPINFER_INDEX_QUERY=lead K=DEEPINFER_INDEX_KEYS_BRANCH=1
export EXTRA_GPU0="tests_new|\$b/test_gpu_model --gtest_filter='GpuIndexQueryLead.*:GpuIndexKeysBranch.*:GpuIndexInputsEarly.*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: early:$E lead:$E,$L keys:$E,$K both:$E,$L,$K' 3;
ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: early:$E lead:$E,$L' 3 --family v41;
trace_v4|$E $L $K OUT=\$OUT/trace_v4 bash tools/gpu/trace_decode.sh 1 16;
trace_v41|$E $L OUT=\$OUT/trace_v41 bash tools/gpu/trace_decode.sh 1 16 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
