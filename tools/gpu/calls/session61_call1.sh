#!/usr/bin/env bash
# Session 61: session 59's attention numerics (bench/gpu/attempts/session59_attention_gemm_outputs_bf16.patch) and
# V4.1's MoE combine read by the next site entry (hc_lagged_site_pre's y_parts: the cluster kernel sums the parts
# where it reads y, as V4's spread site does since session 24) in one pack. First the torch vectors of the per-head
# norm (copy $OUT/head_norm_vectors.safetensors to tests/golden/fixtures/ for HeadNormGolden.TorchCuda); then the
# tests of what either touches (session59_call3.sh's filter plus the lagged site entry, the V4.1 site entry and the
# site combine); then V4.1 with DEEPINFER_MOE_SITE_COMBINE=0 / 1 alternating, 3 repeats (the combine fold alone, the
# same bits: the digests must agree; before the A/B since session 62, so that a cut call still decides (B)); then the
# decode step of HEAD's engine (v4_decode_base) against the pack, V4 and V4.1, batch 1, 2 repeats (V4: the numerics
# alone; V4.1: both).
#   pack (here): HEAD's v4_decode staged as /tmp/st59/v4_decode_base; both changes in the tree;
#     `ninja -C build-cuda test_gpu test_gpu_model v4_decode`, then PACK_ONLY="test_gpu test_gpu_model v4_decode"
#     EXTRA_BINS=/tmp/st59/v4_decode_base BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh
#   usage (GPU machine, repo root): bash tools/gpu/calls/session61_call1.sh; QUICK=1 (~200 s): the vectors, the tests and
#   the switch A/B at 2 repeats, without the base A/B.
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
head_norm_vectors
steps="$(filtered_tests_steps "$ATTENTION_NUMERICS_TESTS:GpuHcLaggedSite.*:GpuV41SiteEntry.*");
"
site_reps=3
[ "${QUICK:-0}" = 1 ] && site_reps=2
steps+="site_v41|OUT=\$OUT/site_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_MOE_SITE_COMBINE \"0 1\" $site_reps --family v41 --batches 1"
[ "${QUICK:-0}" = 1 ] || steps+=";
$(QUICK=1 bin_ab_models dec "v4_decode_base v4_decode")"
export EXTRA_GPU0="$steps"
clock_logged
