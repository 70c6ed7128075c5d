#!/usr/bin/env bash
# Session 60: session 59's attention numerics (bench/gpu/attempts/session59_attention_gemm_outputs_bf16.patch as
# regenerated on d40b52c, whose engine code is 1e74831's: wq_a . u, wkv . u and wq_b . qr in bf16 before their norms,
# V4's per-head query norm in the reference's bf16 ops) on every single-GPU suite, not only session59_call3.sh's
# filtered tests. First the torch reference vectors of the per-head norm (tools/fixtures/make_head_norm_vectors.py on
# this machine's CPU and CUDA, into $OUT: copy the file to tests/golden/fixtures/ for HeadNormGolden.TorchCuda); then
# test_gpu and both halves of test_gpu_model (as session58_call1.sh, ~390-500 s); then the decode step of d40b52c
# (v4_decode_base) against the patched build, V4 and V4.1, batch 1, 2 repeats (the roundings' cost; the logits
# digests change by design). device_call.sh packs its results after every step, so a call cut by its timeout still
# returns the vectors and the finished suites.
#   pack (here): d40b52c's v4_decode staged as /tmp/st59/v4_decode_base, the patch applied, then
#     `ninja -C build-cuda test_gpu test_gpu_model v4_decode` and PACK_ONLY="test_gpu test_gpu_model v4_decode"
#     EXTRA_BINS=/tmp/st59/v4_decode_base BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session60_call1.sh
set -uo pipefail
unset SKIP_SUITES EXTRA_GPU1
source "$(dirname "$0")/steps.sh"
head_norm_vectors
export EXTRA_GPU0="$(QUICK=1 bin_ab_models dec "v4_decode_base v4_decode")"
clock_logged
