#!/usr/bin/env bash
# Fifth device call of session 13 (binaries of the V4.1 site-mix-branch commit): run 81's V4.1 batch-1 timeline had
# each mHC site's mix kernel (~10.5 us) first in the site's serial chain although only the expand at the sublayer's
# end reads it (the collapse takes the previous site's pre). The branch's bitwise test and the V4.1 suites with the
# new default, the same-call A/B against the mix on the main stream, and the new timeline.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session13_call5.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0='v41_mix_tests|$b/test_gpu_model --gtest_filter="GpuSiteMixBranch.*:V41GpuForward.*:GpuPdlModel.V41*:GpuL2PrefetchModel.V41*:GpuExpertLoads.V41*:GpuV41Modules.*";
ab_v41_mix_branch|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_V41_MIX_BRANCH "0 1" 2 --family v41;
trace_v41|OUT=$OUT/v41trace bash tools/gpu/trace_decode.sh 1 10 --family v41'
exec bash "$(dirname "$0")/../device_call.sh"
