#!/usr/bin/env bash
# Session 64: which of session 64's SASS patches cost the step. Run 286 (session64_call1.sh, H100) timed all of them in
# one build (bench/gpu/attempts/session64_sass_paths_run286.patch) 2.2 % slower than HEAD at V4 batch 1 and 8, 0.6-0.9 %
# at V4.1 batch 1 and 4.3 % at V4.1 batch 8, with the same logits digests. v4_decode builds of HEAD (2721111's engine:
# `base`) plus subsets of bench/gpu/attempts/session64_sass_paths.patch, by file:
#   round     dev::round_bf16 through the packed conversion (device_util.cuh, rms_norm.cuh)
#   attn      round + the split's query prologue rounding after the key lists' loads (sink_attention.cu)
#   site      round + the site entries' combine with every part's load first (mhc.cu, moe_combine.cuh)
#   moe_hook  round + swiglu8 and run 286's stage_b (the stagers' `between` hook: fp4_wgmma_kernel at its 168-register
#             cap with 16-24 bytes of stack, HEAD 0)
#   all_hook  run 286's build (all of the above)
#   moe2      round + swiglu8 and stage_b's L1 prefetches before the zeroing (stack 0 again) (stream_gemm.cuh,
#             stream_fp4_wgmma.cuh)
#   all2      the whole of session64_sass_paths.patch
# V4 and V4.1, batches 1 and 8, 2 repeats each (~150 s).
#   pack (here): each variant from HEAD plus its files of the patch, `ninja -C build-cuda v4_decode` (ccache makes each
#     about a minute), copied to /tmp/st64/v4_decode_<name>; then PACK_ONLY="v4_decode" EXTRA_BINS="/tmp/st64/v4_decode_base
#     /tmp/st64/v4_decode_round ..." BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh (session 64's pack: sha256
#     in docs/status.md; its plain v4_decode is a copy of moe2 and is not timed).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session64_call2.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
bins="v4_decode_base v4_decode_round v4_decode_attn v4_decode_site v4_decode_moe_hook v4_decode_all_hook"
bins+=" v4_decode_moe2 v4_decode_all2"
export EXTRA_GPU0="$(bin_ab_models dec "$bins" 2)"
clock_logged
