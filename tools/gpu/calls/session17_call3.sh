#!/usr/bin/env bash
# Third device call of session 17 (binaries of the session's last code): every one-GPU suite at the defaults (with
# the session's new tests: GpuSinkAttention.MergeEpilogueIsBitwiseTheSeparateLaunch, GpuMergeEpilogue.*,
# GpuFp8Gemm.QuantPrologueBitwise, GpuQuantPrologue.*; prefill v9 is v11's remat form now, GpuMoePrefillGemm.*), then
# same-call A/Bs of the two new decode switches on 16 V4-Flash and 10 V4.1-Flash layers (4K, `v4_decode --quick --pdl
# on`): the attention epilogue in the merge launch (DEEPINFER_MERGE_EPILOGUE=1) and wo_b's quantization in its
# prologue (DEEPINFER_FP8_QUANT_PROLOGUE=1, measured with the epilogue on, so its arm 1 is both), then the prefill rows
# of the new v9 at 16384 tokens. ~500 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session17_call3.sh
set -uo pipefail
export EXTRA_GPU0='ab_epilogue|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MERGE_EPILOGUE "0 1" 2;
ab_epilogue_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MERGE_EPILOGUE "0 1" 2 --family v41;
ab_prologue|OUT=$OUT/both DEEPINFER_MERGE_EPILOGUE=1 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_QUANT_PROLOGUE "0 1" 2;
ab_prologue_v41|OUT=$OUT/both_v41 DEEPINFER_MERGE_EPILOGUE=1 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_QUANT_PROLOGUE "0 1" 2 --family v41;
prefill_tail|timeout 140 $b/roofline --prefill-only --prefill-16k --quick --out $OUT/prefill_v9.json 2>&1 | grep -E "^copy|^roofline|mxfp4_prefill_v9 "'
exec bash "$(dirname "$0")/../device_call.sh"
