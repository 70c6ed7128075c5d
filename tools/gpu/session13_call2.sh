#!/usr/bin/env bash
# Planned second device call of session 13: the opt-in forms of session 12 under their switches — the suites that
# cover each (bitwise tests against the default are in the default suites; these run the model paths with the switch
# set; a step may not contain ';': device_call.sh splits the list there), then the whole-model A/Bs (16 V4-Flash layers, 4K, `v4_decode --quick --pdl on`; V4.1 where noted).
#   usage (GPU machine, repo root): bash tools/gpu/session13_call2.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='stages2_model|DEEPINFER_STREAM_STAGES=2 $b/test_gpu_model --gtest_filter="V4GpuForward.*:V41GpuForward.*:GpuMoe.*";
bins2_model|DEEPINFER_INDEX_SELECT=bins2 $b/test_gpu_model --gtest_filter="GpuDecodeFused.Indexer*:GpuCompressorIndexer.*:V4GpuForward.*";
hc_finish_v2|DEEPINFER_HC_SITE_FINISH=v2 $b/test_gpu --gtest_filter="GpuMhc.*:GpuPdl.*:GpuHcSiteSpread.*";
hc_finish_v3|DEEPINFER_HC_SITE_FINISH=v3 $b/test_gpu --gtest_filter="GpuMhc.*:GpuPdl.*:GpuHcSiteSpread.*";
ab_stages|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_STAGES "0 2" 2;
ab_index_select|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_INDEX_SELECT "bins bins2" 2;
ab_hc_finish|bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_HC_SITE_FINISH "v1 v2 v3" 2;
ab_route_kernel_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_ROUTE_KERNEL "v1 v2" 2 --family v41'
exec bash "$(dirname "$0")/device_call.sh"
