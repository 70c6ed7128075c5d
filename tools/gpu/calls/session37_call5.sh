#!/usr/bin/env bash
# Session 37, fifth call: (1) test_gpu at HEAD after the removals (the site selector form, the prefill chunk switch;
# their tests went with them) except GpuFp8Gemm.* (283 s of the suite's ~470; fp8_gemm.cu's kernels have the SASS
# they had when run 194 passed them: sass_same.sh); (2) what batch-invariant mode costs on the decode path (issue 5's
# open measurement): v4_decode --batch-invariant (cuda::set_batch_invariant for the whole run, as
# EngineOptions::batch_invariant) against the default, same call, 2 repeats, both models.
#   usage (GPU machine, repo root; .gpubin: test_gpu, v4_decode): bash tools/gpu/calls/session37_call5.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="gpu_tests|\$b/test_gpu --gtest_filter='-GpuFp8Gemm.*';
bi_v4|OUT=\$OUT/bi_v4 bash tools/gpu/decode_switch_ab.sh \$b FLAG 'none --batch-invariant' 2;
bi_v41|OUT=\$OUT/bi_v41 bash tools/gpu/decode_switch_ab.sh \$b FLAG 'none --batch-invariant' 2 --family v41"
exec bash "$(dirname "$0")/../device_call.sh"
