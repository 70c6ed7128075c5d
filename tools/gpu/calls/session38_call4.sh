#!/usr/bin/env bash
# Session 38, fourth call: V4.1's index wq_b before the query branch forks (DEEPINFER_INDEX_QUERY=lead) gained only
# -0.4 % in run 211: its timeline shows the select's blocks waiting ~10 us for SM room behind the attention's wq_b
# (V4.1's branch grid keeps two stream blocks on every SM). A same-call A/B of lead with the branch grid's options
# (DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM=1, DEEPINFER_BRANCH_GEMV_SPARE_SMS=16|32|66), the index inputs early in all.
# (A record of the run: DEEPINFER_INDEX_QUERY=lead and DEEPINFER_INDEX_KEYS_BRANCH were removed or folded in after it.)
#   usage (GPU machine, repo root; .gpubin: v4_decode): bash tools/gpu/calls/session38_call4.sh
set -uo pipefail
export SKIP_SUITES=1
E=DEEPINFER_INDEX_INPUTS_EARLY=1 L=DEEPINFER_INDEX_QUERY=lead
G=DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM=1 S=DEEPINFER_BRANCH_GEMV_SPARE_SMS
export EXTRA_GPU0="ab_v41|OUT=\$OUT/ab_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV 'first:$E lead:$E,$L lead_b1:$E,$L,$G lead_s16:$E,$L,$S=16 lead_s32:$E,$L,$S=32 lead_s66:$E,$L,$S=66' 3 --family v41;
trace_v41|$E $L $S=32 OUT=\$OUT/trace_v41 bash tools/gpu/trace_decode.sh 1 16 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
