#!/usr/bin/env bash
# Session 34, second call: the first radix pass counted by the score blocks (index_select_bins.cuh TopByteCounts,
# both indexers' decode kernels). Its tests (the decode selects against the CPU and the split kernels in every score
# shape and staging, the CSA2 modules, both models' forwards and step-bitwise checks), the in-step select stamps of
# both models (compare run 188: pass 1 and the ticket), and a same-call BIN A/B against the build before it, carried
# as v4_decode_mid (EXTRA_BINS: c561e16, with fda85be's unconditional loads). A third build (fd57e5a) did not fit:
# the working tree plus .gpubin must stay under 64 MiB.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session34_call2.sh
exec bash "$(dirname "$0")/../select_change_call.sh" v4_decode_mid
