#!/usr/bin/env bash
# Session 64: session 64's SASS patches in one pack (bench/gpu/attempts/session64_*.patch: the split's per-head query
# norm rounded after the key lists' loads issue, dev::round_bf16 through the packed conversion everywhere, the V4.1
# site entry's combine with every part's load first, the SwiGLU prologue's swiglu8; and stage_b's zeroing of the unused
# B slots under the codes' round trip). All keep every output bit: first the tests of the kernels they touch, then
# HEAD's v4_decode (v4_decode_base) against the pack, V4 and V4.1, batches 1 and 8, 3 repeats (the logits digests
# must agree), then the MXFP4 in-step stamps of the pack (b_zero - b_ent: the zeroing off the codes' path). ~250 s.
#   pack (here): HEAD's v4_decode as /tmp/oldpack/v4_decode (renamed v4_decode_base); the patches in the tree;
#     `ninja -C build-cuda test_gpu test_gpu_model v4_decode`, then PACK_ONLY="test_gpu test_gpu_model v4_decode"
#     EXTRA_BINS=/tmp/st64/v4_decode_base BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session64_call1.sh; the full suites after it:
#   bash tools/gpu/calls/session60_call1.sh (~470 s, the same pack).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
touched='GpuStreamFp4Wgmma.*:GpuMxfp4Experts.*:GpuFp4HalfOverlap.*:GpuMoe*:GpuSinkAttention.*:GpuQNormPrologue.*'
touched+=':GpuRmsNorm.*:GpuRope.*:GpuHcLaggedSite.*:GpuV41SiteEntry.*:GpuHcSiteSpread.*:GpuMhc.*:GpuDecodeFused.*'
touched+=':GpuAttentionPdl.*:V4GpuForward.*:V41GpuForward.*'
steps="$(filtered_tests_steps "$touched");
$(bin_ab_models dec "v4_decode_base v4_decode" 3);
$(fp4_stamps_step stamps_v4 '');
$(fp4_stamps_step stamps_v41 '--family v41')"
export EXTRA_GPU0="$steps"
clock_logged
