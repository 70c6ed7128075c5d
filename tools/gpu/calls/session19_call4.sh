#!/usr/bin/env bash
# Fourth device call of session 19 (binaries of a72d447: the compressor branch, the index query first, the query norm
# prologue and the CSA2 auto score shape by default; helper-106's batched score staging behind
# DEEPINFER_INDEX_QUERY_STAGING, default loop): every one-GPU suite at the new defaults, then the staging's first run
# (its decode-select tests ride in the suites), its per-call bench and same-call A/Bs. ~500 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session19_call4.sh
set -uo pipefail
export EXTRA_GPU0='staging_bench_tail|timeout 150 $b/index_select_latency --entries 1024,2048,16384 --out $OUT/query_staging.json > $OUT/query_staging.log 2>&1 || tail -5 $OUT/query_staging.log && grep -E "^n =|bins_auto|batched|block0|csa2_(topk|candidates)_auto|same_as" $OUT/query_staging.log | head -60;
ab_staging|OUT=$OUT/st bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_INDEX_QUERY_STAGING "loop batched" 2;
ab_staging_v41|OUT=$OUT/st41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_INDEX_QUERY_STAGING "loop batched" 2 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
