#!/usr/bin/env bash
# Hardware-counter look at the decode and prefill GEMM kernels (issue 4), run on the H200 machine after
# tools/gpu/check.sh built build-gpu/: Nsight Compute (clocks left alone) on the first launch of each kernel in
# the GPU tests / benchmark, and an opcode histogram of the decode kernels' SASS. Writes $OUT/ncu.txt and
# $OUT/sass.txt and prints the headline counters last.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
BUILD=${BUILD_DIR:-build-gpu}
export DEEPINFER_REQUIRE_GPU=1
tests=$BUILD/gpu/tests/test_gpu
args=(--clock-control none --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy
  --section LaunchStats --section MemoryWorkloadAnalysis)
{
  echo "=== skinny (checkpoint layout) FP8 m=1 n=4096 k=4096 block=128"
  ncu "${args[@]}" -k regex:skinny_gemm_kernel --launch-count 1 "$tests" --gtest_filter=GpuFp8Gemm.SkinnyDecodeShapes
  echo "=== packed FP8 m=1 n=4096 k=4096 block=128, then m=1 n=1024 k=4096"
  ncu "${args[@]}" -k regex:packed_gemm_kernel --launch-count 2 "$tests" --gtest_filter=GpuFp8Gemm.PackedDecodeShapes
  echo "=== packed MXFP4 experts n=4096 k=4096, 6 groups of 1 row"
  ncu "${args[@]}" -k regex:packed_gemm_kernel --launch-count 1 "$tests" --gtest_filter=GpuMxfp4Experts.PackedDecodeGroups
  echo "=== prefill MXFP4 v4 w13 4096 tokens (benchmark's first launch)"
  ncu "${args[@]}" -k regex:mxfp4_prefill_kernel --launch-count 1 "$BUILD/gpu/bench/roofline" --out /tmp/profile_roofline.json \
    --gemm-only --quick
} >"$OUT/ncu.txt" 2>&1
lib=$BUILD/libdeepinfer_cuda.a
{
  for f in _ZN9deepinfer4cuda6packed18packed_gemm_kernelILNS0_6skinny12WeightFormatE0ELi1E13__nv_bfloat16EEvNS1_4ArgsE \
    _ZN9deepinfer4cuda6packed18packed_gemm_kernelILNS0_6skinny12WeightFormatE1ELi1EfEEvNS1_4ArgsE; do
    echo "=== $f: opcode histogram (whole kernel)"
    cuobjdump -sass -fun "$f" "$lib" | grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+[A-Z][A-Z0-9._]*' | awk '{print $2}' |
      sed -E 's/\..*//' | sort | uniq -c | sort -rn | head -40
  done
} >"$OUT/sass.txt" 2>&1
grep -E "^===|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Issued Warp|No Eligible|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Stall" "$OUT/ncu.txt" | head -120
