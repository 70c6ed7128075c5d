#!/usr/bin/env bash
# Session 34, fourth call: the decode selects' emit reads one page-table word a thread (index_select_bins.cuh
# emit_rows: pages of a multiple of 8 entries hold a thread's 8 items at consecutive rows) instead of one load and one
# division per item. Its tests (run 189's list), the in-step select stamps of both models (compare run 190's emit:
# V4.1 7.4-12.1 K cycles, V4 3.6 K), and a same-call BIN A/B against the build before it (v4_decode_p1 = e453509,
# EXTRA_BINS).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session34_call4.sh
exec bash "$(dirname "$0")/../select_change_call.sh" v4_decode_p1
