#!/usr/bin/env bash
# First device calls of session 18 (binaries of session 17's last code, 4b1c796, in the main tree's .gpubin).
#  a: every suite (on nvidia-h200-x2 also test_gpu_ep / test_gpu_dp_engine / test_gpu_comm, not run since session 9),
#     then run 99's intermittent GpuMoe.DecodeV9WideFullWidth mismatch (bench/gpu/NOTES.md "Run 100") with its seed,
#     repeated while a second test process shares the GPU, as the suites did in run 99. ~480 s.
#  b: the same test once under compute-sanitizer's racecheck, then initcheck (slow; each step's limit is 300 s). ~560 s.
#  c: no suites: a's loaded repeats, then b's racecheck alone (the suites run in the session's last call instead).
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session18_call1.sh a|b|c
set -uo pipefail
seed=9506017061792951241
env="DEEPINFER_TEST_SEED=$seed"
test="\$b/test_gpu_model --gtest_filter=GpuMoe.DecodeV9WideFullWidth"
case ${1:-} in
  a) export EXTRA_GPU0="v9wide_loaded_tail|(\$b/test_gpu_model --gtest_filter=GpuMoe.* --gtest_repeat=3 > /dev/null 2>&1 &) && $env $test --gtest_repeat=12 2>&1 | grep -E '^\[ +(OK|FAILED) |mismatches=[1-9]' | tail -30" ;;
  b) export SKIP_SUITES=1 EXTRA_GPU0="v9wide_racecheck_tail|$env timeout 280 compute-sanitizer --tool racecheck $test 2>&1 | tail -20;
v9wide_initcheck_tail|$env timeout 280 compute-sanitizer --tool initcheck $test 2>&1 | tail -20" ;;
  c) export SKIP_SUITES=1 EXTRA_GPU0="v9wide_loaded_tail|(\$b/test_gpu_model --gtest_filter=GpuMoe.* --gtest_repeat=3 > /dev/null 2>&1 &) && $env $test --gtest_repeat=12 2>&1 | grep -E '^\[ +(OK|FAILED) |mismatches=[1-9]' | tail -30;
v9wide_racecheck_tail|$env timeout 280 compute-sanitizer --tool racecheck $test 2>&1 | tail -20" ;;
  *) echo "usage: $0 a|b|c" >&2; exit 2 ;;
esac
exec bash "$(dirname "$0")/../device_call.sh"
