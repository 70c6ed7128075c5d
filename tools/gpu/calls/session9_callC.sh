#!/usr/bin/env bash
# Session 9, last call (two H200s, binaries of f9caa01): H75's mHC site mix on tensor cores (DEEPINFER_HC_MIX=mma):
# its kernel tests, the site tests with the switch on, the roofline rows and a same-call A/B on GPU 0; the V4 / V4.1
# forward suites with the switch on GPU 1. Through tools/gpu/device_call.sh without the full suites.
export SKIP_SUITES=1
export EXTRA_GPU0='mix_kernels|$b/test_gpu --gtest_filter="GpuHcMixMma.*";
mix_site_tests|DEEPINFER_HC_MIX=mma $b/test_gpu --gtest_filter="GpuMhc.*:GpuHcSiteSpread.*";
roofline_full|$b/roofline --out $OUT/roofline_full.json;
mix_ab|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_HC_MIX "default mma" 2'
export EXTRA_GPU1='mix_model|DEEPINFER_HC_MIX=mma $b/test_gpu_model --gtest_filter="V4GpuForward.*:V41GpuForward.*"'
exec bash "$(dirname "$0")/../device_call.sh"
