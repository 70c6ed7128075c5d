#!/usr/bin/env bash
# Session 44's experiment (written in session 44, which got no device time: the workplace's loans were paused from
# the start). V4.1's grouped MXFP4 prefill at activation block 32 (26-27 % of the dense FP8 rate at 16384 tokens, run
# 200; the issue's target is 50 %).
#  - DEEPINFER_PREFILL_ACT32_HALVES=1: the act-32 clean loops of v8 and v9 with each 32-wide block's wgmma split over
#    the item's two token halves, so that one half is promoted while the other half's group runs
#    (layers/moe/mxfp4_prefill.cu, consume_clean's kHalves; bench/gpu/NOTES.md "Session 44"). Where it applies, the
#    serial loop waits for every block's wgmma before its promotion: v9's items of NT 7..10 (at 16384 tokens V4.1's
#    ~256 rows per expert make two chunks of ~128, NT 8) and v8's of NT 2..6 (at 4096 tokens ~64 rows per expert,
#    NT 4; the engine's 2048-row prefill chunks ~32, NT 2). The same bits as the serial loops (test lines
#    "halves bitwise-vs-default", 0 mismatches).
#  - DEEPINFER_PREFILL_ACT32_SLOTS=1: v9's act-32 token scales in each stage in v3's slot order (chunk_scales_kernel,
#    as at act block 128), so that a lane loads its four tokens of a 16-token group and 32-wide block with one 16-byte
#    load instead of four 4-byte ones: -15 to -17 % instructions per tile in the NT 7-10 clean loops (SASS). The same
#    bits (test lines "slots" and "halves+slots bitwise-vs-default").
# Steps:
#  1. GpuMoePrefillGemm.* (every case; the act-32 v8 / v9 cases also run the halves / slots / both forms, bitwise
#     against the default).
#  2. `roofline --prefill-only --quick` (the 4096- and 16384-token blocks) twice in the order off, halves, slots,
#     halves+slots: the V4.1 w13 / w2 rows of v8 (4096; halves only) and v9 (16384; v8 / v13 run v9's kernel there at
#     act block 32) against the same run's dense FP8 rate. V4's rows (act block 128) do not change (the same kernels).
#  3. ncu stall samples of the act-32 v9 kernel's first launch (V4.1 w13 at 16384 tokens), default and both forms on:
#     where the loop waits (tools/gpu/ncu_sass_stalls.sh; the source page as SASS per instruction).
#   usage (GPU machine, repo root; .gpubin: test_gpu, roofline of this commit or later):
#     bash tools/gpu/calls/session44_call1.sh (~4-6 min; run 200's tests + three 16384-token rooflines took 25 s)
set -uo pipefail
export SKIP_SUITES=1
H=DEEPINFER_PREFILL_ACT32_HALVES=1 L=DEEPINFER_PREFILL_ACT32_SLOTS=1
P="--prefill-only --quick"
S="--prefill-only --prefill-16k --quick"
N="NCU_EXTRA='--kernel-name-base demangled' bash tools/gpu/ncu_sass_stalls.sh"
export EXTRA_GPU0="prefill_tests|\$b/test_gpu --gtest_filter='GpuMoePrefillGemm.*';
prefill_off1|\$b/roofline $P --out \$OUT/prefill_off1.json;
prefill_halves1|$H \$b/roofline $P --out \$OUT/prefill_halves1.json;
prefill_slots1|$L \$b/roofline $P --out \$OUT/prefill_slots1.json;
prefill_both1|$H $L \$b/roofline $P --out \$OUT/prefill_both1.json;
prefill_off2|\$b/roofline $P --out \$OUT/prefill_off2.json;
prefill_halves2|$H \$b/roofline $P --out \$OUT/prefill_halves2.json;
prefill_slots2|$L \$b/roofline $P --out \$OUT/prefill_slots2.json;
prefill_both2|$H $L \$b/roofline $P --out \$OUT/prefill_both2.json;
stalls_default|$N act32_default 'mxfp4_prefill_v9_kernel<true' 0 -- \$b/roofline $S --out /tmp/stalls_default.json;
stalls_both|$H $L $N act32_both 'mxfp4_prefill_v9_kernel<true' 0 -- \$b/roofline $S --out /tmp/stalls_both.json"
exec bash "$(dirname "$0")/../device_call.sh"
