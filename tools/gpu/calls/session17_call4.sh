#!/usr/bin/env bash
# Fourth device call of session 17 (binaries of 4b1c796: rope_rotate's contraction pinned, the merge epilogue on by
# default, wo_b's quantization prologue at one row by default, prefill v9 = the remat form): every one-GPU suite at
# the new defaults; run 99's GpuMoe.DecodeV9WideFullWidth failure again with its seed (is it seed-dependent?); the
# same-call A/Bs of both switches against their off setting on 16 V4-Flash and 10 V4.1-Flash layers; the prefill
# rows of the new v9 at 16384 tokens. ~420 s.
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session17_call4.sh
set -uo pipefail
export EXTRA_GPU0='v9wide_seed_tail|DEEPINFER_TEST_SEED=9506017061792951241 $b/test_gpu_model --gtest_filter=GpuMoe.DecodeV9WideFullWidth 2>&1 | grep -vE "mismatches=0|info only" | tail -25;
ab_epilogue|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MERGE_EPILOGUE "0 1" 2;
ab_epilogue_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_MERGE_EPILOGUE "0 1" 2 --family v41;
ab_prologue|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_QUANT_PROLOGUE "0 1" 2;
ab_prologue_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_FP8_QUANT_PROLOGUE "0 1" 2 --family v41;
prefill_tail|timeout 140 $b/roofline --prefill-only --prefill-16k --quick --out $OUT/prefill_v9.json 2>&1 | grep -E "^copy|^roofline|mxfp4_prefill_v9 "'
exec bash "$(dirname "$0")/../device_call.sh"
