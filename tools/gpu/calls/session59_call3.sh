#!/usr/bin/env bash
# Written in session 59, not run (three refused starts left too little device time): the attention's GEMM outputs as
# the reference holds them (bench/gpu/attempts/session59_attention_gemm_outputs_bf16.patch: wq_a . u, wkv . u and
# wq_b . qr rounded to bf16 before q_norm / kv_norm and V4's per-head query norm, that norm in the reference's bf16
# ops; CPU and GPU together). First the torch reference vectors of the per-head norm
# (tools/fixtures/make_head_norm_vectors.py, CPU and CUDA, into $OUT: copy the file to tests/golden/fixtures/ for
# HeadNormGolden.TorchCuda); then, in test_gpu and test_gpu_model, the tests of what the patch touches (the norms,
# RoPE, attention and its query prologue, KV rows, PDL chains, the decode fusions, the indexer's query, the V4 / V4.1
# forwards and engine against the CPU, batch invariance, the MoE / mHC combines; with time to spare run every suite
# instead, as session58_call1.sh); then the decode step of 8c089db's engine code (v4_decode_base) against the patched build, V4
# and V4.1, batch 1, 2 repeats (the cost of the roundings; the logits digests change by design).
#   pack (here): the patch applied, `ninja -C build-cuda test_gpu test_gpu_model v4_decode`, HEAD's v4_decode
#     (before the patch) staged as /tmp/st59/v4_decode_base, then PACK_ONLY="test_gpu test_gpu_model v4_decode"
#     EXTRA_BINS=/tmp/st59/v4_decode_base BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session59_call3.sh
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
head_norm_vectors
steps="$(filtered_tests_steps "$ATTENTION_NUMERICS_TESTS");
"
steps+="$(QUICK=1 bin_ab_models dec "v4_decode_base v4_decode")"
export EXTRA_GPU0="$steps"
clock_logged
