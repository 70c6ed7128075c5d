#!/usr/bin/env bash
# v4_decode with session 11's three batch-1 schedule changes turned off (the session-10 schedule, same binary): the
# routing counters by a memset node, the shared expert after the routing, the indexer's query after the join. For a
# same-call A/B: cp this next to v4_decode as v4_decode_before11, then
#   tools/gpu/decode_switch_ab.sh BIN_DIR BIN "v4_decode_before11 v4_decode" 3
export DEEPINFER_MOE_TICKET=memset DEEPINFER_MOE_SHARED_FIRST=0 DEEPINFER_INDEX_QUERY=after_join
exec "$(dirname "$0")/v4_decode" "$@"
