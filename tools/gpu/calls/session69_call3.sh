#!/usr/bin/env bash
# Session 69's third call (pack af7d4a4a; HEAD's engine is v4_decode_bf16q): run 307 found the select's ticket ~5 us
# after the last score block's scores even with nothing beside the select (DEEPINFER_GPU_SIDE_STREAM=0: V4 ticket
# 8.35 us, scores done by 3.3 us; V4.1 11.0 / 3.7 us). In the selector form (the default at batch 1) the ticket is
# stamped when the selector has finished its rehearsal AND seen every arrival: with the scores on the tensor cores
# the rehearsal may now be the longer. Here:
#   1. the select stamps in the ticket form (the last score block selects, no rehearsal), V4 and V4.1 at batch 1;
#   2. decode, selector form (default) against the ticket form, V4 and V4.1, batch 1, 4 repeats (both orders).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session69_call3.sh   (~4 min)
set -uo pipefail
source "$(dirname "$0")/steps.sh"
call_setup /tmp/deepinfer-bin
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
ticket=(DEEPINFER_INDEX_SELECTOR=ticket DEEPINFER_CSA2_SELECTOR=ticket)
for fam in v4 v41; do select_stamps_run ${fam}_ticket $b/v4_decode_bf16q $fam "${ticket[@]}"; done
head=/tmp/deepinfer-head && mkdir -p $head && ln -sf $b/v4_decode_bf16q $head/v4_decode
decode_ab_models $head ENV "block: ticket:DEEPINFER_INDEX_SELECTOR=ticket,DEEPINFER_CSA2_SELECTOR=ticket" 4 1
