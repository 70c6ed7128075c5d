#!/usr/bin/env bash
# Written in session 53 for the next session's first call: is run 253's V4 batch-8 +0.59 % (session 53's landing
# against eeef166) real, and where from? Builds:
#   v4_decode        main
#   v4_decode_one    + bench/gpu/attempts/session53_spread_rounds_one_token.patch (V4's spread site takes its
#                    compile-time-lanes form at one token only: batch 2-8 run eeef166's site kernel)
#   v4_decode_nrf    + bench/gpu/attempts/session53_norm_rows_exact_factor.patch (helper-159: the query norm's mean
#                    by 2^-k, rsqrt without its subnormal guard, the scale slot early; 0.05-0.2 % modelled)
#   v4_decode_gemv3  + bench/gpu/attempts/session53_gemv_fastdiv_only.patch (helper-160: wo_a's one-token GEMV with
#                    main's loop, only the group by FastDiv and the dead `t0 < rows` branches gone; helper-157's
#                    rotated loop waited for its weights before issuing x, two round trips a batch: its +0.4-0.7 %)
#   v4_decode_s52    main with session 53's two landings reverted (eeef166's decode code)
#   roofline_pv4     + bench/gpu/attempts/session53_prefill_v4_scales_ahead.patch (helper-161: V4's v13 prefill loads
#                    the first token scales of a K tile before its wgmma wait; +1-2.5 % of V4 w13 / w2 modelled),
#                    against roofline (main), 3 alternating `--prefill-only --prefill-16k --quick` runs each
# 8 alternating repeats, batches 1 / 8, both models (~5 min), the prefill A/B (~30 s), then the norm / site / GEMV /
# prefill tests with all four patches.
#   pack (here, ~15 min): the revert conflicts with nrf (both touch rms_norm.cu), so two packs, one stage:
#     git diff HEAD eeef166 -- src > /tmp/revert53.patch
#     KEEP_STAGE=/tmp/st54 tools/gpu/pack_patch_ab.sh s52=/tmp/revert53.patch
#     S=bench/gpu/attempts; KEEP_STAGE=/tmp/st54e tools/gpu/pack_patch_ab.sh \
#       one=$S/session53_spread_rounds_one_token.patch nrf=$S/session53_norm_rows_exact_factor.patch \
#       gemv3=$S/session53_gemv_fastdiv_only.patch pv4:roofline=$S/session53_prefill_v4_scales_ahead.patch
#     cp /tmp/st54/v4_decode_s52 build-cuda/gpu/tests/test_gpu build-cuda/gpu/tests/test_gpu_model /tmp/st54e/ && \
#       strip /tmp/st54e/* && tar -cf - -C /tmp/st54e . | xz -T2 --lzma2=preset=6,dict=192MiB > .gpubin/bins.tar.xz
#     (the test binaries in build-cuda are the last pack's, built with all four patches)
#   (the nrf patch adds tests/unit/core/test_rms_factor.cpp: run it with `make test` before landing)
#   usage (GPU machine, repo root): bash tools/gpu/calls/session54_call1.sh (QUICK=1: 3 repeats).
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
bins="v4_decode v4_decode_one v4_decode_nrf v4_decode_gemv3 v4_decode_s52"
steps="$(bin_ab_models ab_s54a "$bins" 8 3)"
tests='GpuW8A16.*:GpuRmsNorm.*:GpuFp8Quantize.*:GpuBatchInvariance.*:GpuMhc.*:GpuHcSiteSpread.*:GpuPdlModel.*'
tests+=':GpuDecodeFused.*:GpuMoePrefillGemm.*'
steps+=";
$(prefill_ab_steps "roofline roofline_pv4")"
steps+=";
$(filtered_tests_steps "$tests")"
export EXTRA_GPU0="$steps"
[ "${PRINT_ONLY:-0}" = 1 ] && { printf '%s\n' "$EXTRA_GPU0"; exit 0; }
exec bash "$(dirname "$0")/../device_call.sh"
