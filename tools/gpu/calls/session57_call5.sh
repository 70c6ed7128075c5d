#!/usr/bin/env bash
# Written in session 57, not run (the device time ran out): the y store's form and L2 policy
# (bench/gpu/attempts/session57_prefill_v13_store_hints.patch: DEEPINFER_PREFILL_STORE 0 = plain st.global, 1 = no
# stores (wrong output), 2 = st.global.cs, 3 = an L2 evict_first policy, 4 = bf16 y (REF4's rounding of the expert
# outputs at half the bytes; no bf16 reader yet: timing only); 2 and 3 keep the bits). Run 272 found the stores cost
# V4 w2 14 % and w13 7-10 % at the same SM clock; run 274 that 16-byte stores of the same bytes get ~1 % of it back,
# run 273 that desynchronized SMs get none: the readings to test are L2 eviction of the operands by y (forms 2, 3)
# and the bytes themselves (form 4). 5 forms x 3 rounds of `--prefill-only --prefill-16k --quick --sustained
# --sustain-ms 300`, clock log beside the call; then the prefill GEMM's bitwise tests under forms 2 and 3 (needs
# test_gpu and test_gpu_model built with the patch); then the v13 launches' DRAM bytes and L2 hit rate under forms
# 0, 1, 3 and 4 (tools/gpu/ncu_prefill_traffic.sh): whether y's stores raise the operands' DRAM reads.
#   pack (here): the patch applied, `ninja -C build-cuda roofline test_gpu test_gpu_model`,
#     PACK_ONLY="roofline test_gpu test_gpu_model" BUILD_DIR=build-cuda bash tools/gpu/pack_prebuilt.sh, the patch
#     reverted
#   usage (GPU machine, repo root): bash tools/gpu/calls/session57_call5.sh
#   table (here): python3 tools/gpu/prefill_sustained_table.py DIR (DIR: the call's steps/ folder)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
args="--prefill-only --prefill-16k --quick --sustained --sustain-ms 300"
steps="$(env_rounds_steps form DEEPINFER_PREFILL_STORE "0 1 2 3 4" 3 "$args")"
for v in 2 3; do
  steps+=";
tests_kernels_form$v|DEEPINFER_PREFILL_STORE=$v \$b/test_gpu --gtest_filter='GpuMoePrefillGemm.*';
tests_model_form$v|DEEPINFER_PREFILL_STORE=$v \$b/test_gpu_model --gtest_filter='GpuMoePrefillGemm.*:GpuMoe.*'"
done
for v in 0 1 3 4; do
  steps+=";
ncu_form$v|DEEPINFER_PREFILL_STORE=$v OUT=\$OUT bash tools/gpu/ncu_prefill_traffic.sh form$v"
done
export EXTRA_GPU0="$steps"
clock_logged
