#!/usr/bin/env bash
# Session 30, first call (test_gpu_model of session 29's last code is enough: PACK_ONLY="test_gpu_model"): where the
# side-stream race of runs 160-164 writes (bench/gpu/NOTES.md "Session 29"). GpuMoe.DecodeV8InvariantRunToRunFullWidth
# fails in about half of its plain runs; under compute-sanitizer memcheck (shared-memory out-of-bounds writes, e.g. a
# CTA past its dynamic shared memory into a neighbouring CTA of the concurrent kernel) and initcheck (reads of memory
# no one wrote, e.g. bulk copies in flight past a block's exit). Then the plain test 5 times: since 2f54f79 its four
# forms (side stream / one stream / side stream with the shared or the routed experts on the register kernels) say
# which launch's kernel the race needs, and since 0146aa3 every replay poisons the SMs' shared memory first, so a
# read of shared memory a block did not write shows as `non-finite outputs` (compiled in session 29, not yet run).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session30_call1.sh
set -uo pipefail
t='$b/test_gpu_model --gtest_filter=GpuMoe.DecodeV8InvariantRunToRunFullWidth'
g='grep -hE "ERROR SUMMARY|Invalid|out of bounds|Uninitialized|mismatches=[1-9]|^\[  (PASSED|FAILED) " '
export SKIP_SUITES=1 EXTRA_GPU0="memcheck|timeout 280 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 20 $t > \$OUT/memcheck.log 2>&1 || true && $g \$OUT/memcheck.log | head -40;
initcheck|timeout 200 /usr/local/cuda/bin/compute-sanitizer --tool initcheck --print-limit 20 $t > \$OUT/initcheck.log 2>&1 || true && $g \$OUT/initcheck.log | head -40;
plain|timeout 60 $t --gtest_repeat=5 > \$OUT/plain.log 2>&1 || true && $g \$OUT/plain.log"
exec bash "$(dirname "$0")/../device_call.sh"
