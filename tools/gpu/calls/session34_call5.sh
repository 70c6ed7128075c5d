#!/usr/bin/env bash
# Session 34, fifth call: the radix passes after the first count with a plain shared atomic per key instead of one
# per distinct bin a warp (__match_any_sync; index_select_bins.cuh select_by_bins). Its tests (run 189's list), the
# in-step select stamps of both models (compare run 191's passes 2-3: V4.1 6.5 K / 2.7 K cycles, V4 2.7 K), and a
# same-call BIN A/B against the build before it (v4_decode_emit = 38183a1, EXTRA_BINS).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session34_call5.sh
exec bash "$(dirname "$0")/../select_change_call.sh" v4_decode_emit
