#!/usr/bin/env bash
# Session 9, third call (two H200s, binaries of ec4aa09): H71's V4.1 packed KV records (DEEPINFER_KV_FORMAT=fp8) and
# H72's prefill v8 (DEEPINFER_PREFILL_KERNEL=v8), through tools/gpu/device_call.sh without the full suites.
#   usage (GPU machine, repo root, prebuilt test_gpu test_gpu_model v4_decode roofline in .gpubin)
export SKIP_SUITES=1
# Run 56 ran only the first step of each list (read stopped at the newline): records_kernels 29/29 and
# records_model 21/21 passed; those two are commented out for run 57.
# records_kernels|$b/test_gpu --gtest_filter="GpuKvRecordV41.*:GpuKvRecord.*:GpuSinkAttention.*:GpuKvCache.*:GpuRmsNorm.*:GpuRope.*:GpuMoePrefillGemm.*:GpuMhc.*"
# records_model|$b/test_gpu_model --gtest_filter="V41GpuForward.*:GpuV41Modules.*:V4GpuForward.KvFormatsBitwise:GpuDecodeFused.*"
export EXTRA_GPU0='roofline_prefill|$b/roofline --prefill-only --out $OUT/roofline_prefill.json;
prefill_ab|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_PREFILL_KERNEL "v5 v8" 2'
export EXTRA_GPU1='records_model_fp8|DEEPINFER_KV_FORMAT=fp8 $b/test_gpu_model --gtest_filter="V41GpuForward.*";
records_unfused|DEEPINFER_FUSED_ATTENTION_STEPS=0 $b/test_gpu_model --gtest_filter="V41GpuForward.KvFormatsBitwise:V4GpuForward.KvFormatsBitwise";
v41_kv_tail|bash tools/gpu/kv_format_ab.sh $b v41 6 2'
exec bash "$(dirname "$0")/../device_call.sh"
