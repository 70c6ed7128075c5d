#!/usr/bin/env bash
# Last device call of session 13 (binaries of the session's final code commit, packed with tools/gpu/pack_prebuilt.sh):
# every one-GPU suite with the new defaults (two-stage decode stream, mHC site finish v2; warp tiles, route v2, bins2,
# prefill v10 / v10h deleted), then the benchmark tables of both families (4K / 64K decode at batch 1..256, 4K / 32K
# prefill), the batch-1 timeline (tools/gpu/trace_decode.sh) and per-instruction stall samples of prefill v9 on V4 w13
# at 16384 tokens (NOTES "Grouped MXFP4 prefill v9 read from its SASS": the split of its serial cycles).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session13_call3.sh
set -uo pipefail
export EXTRA_GPU0='tables_v4_tail|$b/v4_decode --chunk 2048 --pdl on --out $OUT/v4_decode_v4.json;
tables_v41_tail|$b/v4_decode --family v41 --chunk 2048 --pdl on --out $OUT/v4_decode_v41.json;
trace_b1|bash tools/gpu/trace_decode.sh 1 16;
ncu_v9_tail|bash tools/gpu/ncu_sass_stalls.sh prefill_v9_16k mxfp4_prefill_v9_kernel 0 -- $b/roofline --prefill-only --prefill-16k --quick --out $OUT/roofline_16k.json && tail -n 60 $OUT/ncu_sass_prefill_v9_16k.txt'
exec bash "$(dirname "$0")/../device_call.sh"
