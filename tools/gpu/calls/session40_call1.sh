#!/usr/bin/env bash
# Session 40, first call (written in session 39, compiled, not run).
#  - The last code's forward / PDL tests at the defaults (session 39's last call found no machine: launch_stream's
#    ring choice moved into stream_ring, host code only, every kernel's SASS unchanged).
#  - V4's index query finish in the index wq_b's launch by tickets (DEEPINFER_INDEX_FINISH_TICKET=1, default off):
#    the 256-block product as today, and the block that stores a head's last tile (counted on a per-head ticket)
#    finishes that head (RoPE, Hadamard, FP4, head-weight scale; stream_gemm.cuh finish_heads). Runs 217-218's
#    one-block-a-head form lost because a block then streamed 8 tiles in series; this keeps the grid. Its tests,
#    V4's forward / PDL tests with it on, an A/B (4 repeats) and the timeline.
#  - The branch GEMVs' spare SMs for multi-row launches only (DEEPINFER_BRANCH_GEMV_SPARE_SMS_MULTIROW, host code;
#    run 216: 16 spare SMs at every row count cost batch 1 +0.5 % and gained batch 8 -1.2 %): A/B on both models.
#  - (added in session 40, which was lent no machine) stream_probe --act-only: the activation under a flood (modes 0-4,
#    the same-run references) and, new, relayed by a quiet CTA of a cluster with one multicast bulk copy into the
#    flooding CTAs' shared memory (act_relay_kernel). If the flooding CTAs get it in well under mode 0's 1.9 / 4.8 us
#    (2 / 6 stages), a stream launch's first-stage delay has a fix (docs/status.md "Next session" item 01).
#   usage (GPU machine, repo root; .gpubin: test_gpu_model, v4_decode, stream_probe): bash tools/gpu/calls/session40_call1.sh
set -uo pipefail
export SKIP_SUITES=1
T=DEEPINFER_INDEX_FINISH_TICKET=1 M=DEEPINFER_BRANCH_GEMV_SPARE_SMS_MULTIROW
export EXTRA_GPU0="relay_probe|timeout 120 \$b/stream_probe --act-only --out \$OUT/stream_probe_act.json > \$OUT/stream_probe_act.log 2>&1 || true && tail -28 \$OUT/stream_probe_act.log;
tests_default|\$b/test_gpu_model --gtest_filter='V4GpuForward.*:V41GpuForward.*:GpuPdlModel.*';
tests_new|\$b/test_gpu_model --gtest_filter='GpuCompressorIndexer.*:GpuIndexFinishTicket.*:GpuBranchGemvGrid.*';
tests_on|$T \$b/test_gpu_model --gtest_filter='V4GpuForward.*:GpuIndexInputsEarly.*:GpuCompressorBranch.V4*:GpuPdlModel.V4*';
ab_v4|OUT=\$OUT/ab_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: ticket:$T' 4;
ab_multirow_v4|OUT=\$OUT/ab_multirow_v4 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: m16:$M=16 m32:$M=32' 3;
ab_multirow_v41|OUT=\$OUT/ab_multirow_v41 bash tools/gpu/decode_switch_ab.sh \$b ENV 'base: m16:$M=16 m32:$M=32' 2 --family v41;
trace_v4|$T OUT=\$OUT/trace_v4 bash tools/gpu/trace_decode.sh 1 16"
exec bash "$(dirname "$0")/../device_call.sh"
