#!/usr/bin/env bash
# Ran as run 199 (bench/results/gpu_h200_run198-208_COMMAND.md); the switch it measures lost and was removed after it:
# rerun it with the binaries of commit 72a9dc1.
# Session 37, second call (prepared in session 36, not run): the mHC site's selector form (DEEPINFER_HC_SITE_SELECTOR=
# block, layers/mhc/mhc_site_tail.h hc_site_selector: chunk 0 of each token finishes the site instead of the last chunk
# to arrive, and its finish and comb warps run the finish once on zero partials before pdl_wait, through the same
# out-of-line function as the real finish, so that the real finish does not fetch its code first).
# 1. Its tests: GpuHcSiteSpread.* (SelectorMatchesTicketBitwise: every shape the spread kernel takes, eager, two calls
#    back to back on one workspace; GraphReplayMatchesEagerBitwise and ChainedGraphBitwiseAndTiming now run the
#    selector form too; the chained graph's SITE_TIMING line gives today / spread / spread+selector us per launch).
# 2. A same-call A/B of the step on both models (4 repeats; the token checksums must agree between the forms).
# If a test hangs, chunk 0's wait (site_arrive_at_selector, mhc.cu) is the first suspect; the production (ticket)
# kernel's instructions are unchanged (tools/gpu/sass_compare.py, session 36).
#   usage (GPU machine, repo root; .gpubin: test_gpu, v4_decode): bash tools/gpu/calls/session37_call2.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="site_tests|\$b/test_gpu --gtest_filter='GpuHcSiteSpread.*';
ab_v4|OUT=\$OUT/ab_site_v4 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_HC_SITE_SELECTOR 'ticket block' 4;
ab_v41|OUT=\$OUT/ab_site_v41 bash tools/gpu/decode_switch_ab.sh \$b DEEPINFER_HC_SITE_SELECTOR 'ticket block' 4 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
