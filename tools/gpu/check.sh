#!/usr/bin/env bash
# The GPU check of the CUDA backend (issue 4), run on the H200 machine from the repository root:
#   configure + build (ninja, all cores) -> the `gpu`-labelled tests -> the roofline benchmark,
# with logs and JSON under $OUT (at most 8 files come back from the device machine) and a short summary last.
#   usage: tools/gpu/check.sh [--quick] [--gemm-only] [--no-roofline] [--no-model-bench] [--tests REGEX]
#     --quick: fewer timing replays in the benchmarks; --gemm-only: the roofline's ceilings and GEMM rows only;
#     --no-roofline / --no-model-bench: skip that benchmark; --tests REGEX: only the gpu tests matching REGEX
# The machine has no package registry: when build-gpu-deps/ was carried along (tools/gpu/pack_deps.sh), the
# build dependencies come from there.
set -uo pipefail
quick=""
gemm_only=""
roofline=1
model_bench=1
tests_regex=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick="--quick" ;;
    --gemm-only) gemm_only="--gemm-only" ;;
    --no-roofline) roofline=0 ;;
    --no-model-bench) model_bench=0 ;;
    --tests) tests_regex="$2"; shift ;;
  esac
  shift
done
OUT=${OUT:-$PWD/gpu-out}
export DEEPINFER_REQUIRE_GPU=1
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH && export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
mkdir -p "$OUT"
BUILD=${BUILD_DIR:-build-gpu}
log="$OUT/build.log"
: >"$log"
t0=$(date +%s)
stamp() { echo "[check +$(($(date +%s) - t0))s] $*" | tee -a "$log"; }

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total,temperature.gpu,power.draw \
    --format=csv
  nvcc --version | tail -2
  cmake --version | head -1
  c++ --version | head -1
  nproc
} >"$OUT/device.txt" 2>&1
cat "$OUT/device.txt"

prefix_args=()
if [ -d build-gpu-deps ]; then
  deps=$PWD/build-gpu-deps
  if [ ! -f "$deps/prefix/lib/cmake/GTest/GTestConfig.cmake" ] && [ -d "$deps/googletest" ]; then
    stamp "building GoogleTest from the carried sources"
    cmake -S "$deps/googletest" -B "$deps/gtest-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$deps/prefix" -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_GMOCK=OFF >>"$log" 2>&1 &&
      cmake --build "$deps/gtest-build" --target install -j "$(nproc)" >>"$log" 2>&1 || stamp "GoogleTest build FAILED"
  fi
  prefix_args=(-DCMAKE_PREFIX_PATH="$deps/prefix")
fi

stamp "configure"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_CUDA=ON -DDEEPINFER_CUDA_PTXAS_VERBOSE=ON \
  "${prefix_args[@]}" >>"$log" 2>&1 || { stamp "configure FAILED"; tail -40 "$log"; exit 1; }
stamp "build"
ninja -C "$BUILD" -j "$(nproc)" test_gpu test_gpu_model roofline v4_decode >>"$log" 2>&1 || { stamp "build FAILED"; grep -E "error|FAILED" "$log" | head -40; exit 1; }
stamp "built"
# The tile GEMM must run on Hopper's wgmma (QGMMA in SASS), not on an older tensor-core path.
if command -v cuobjdump >/dev/null; then
  echo "SASS QGMMA: $(cuobjdump --dump-sass "$BUILD/libdeepinfer_cuda.a" 2>/dev/null | grep -c QGMMA)," \
    "HMMA: $(cuobjdump --dump-sass "$BUILD/libdeepinfer_cuda.a" 2>/dev/null | grep -c HMMA)," \
    "QMMA/mma.sync e4m3: $(cuobjdump --dump-sass "$BUILD/libdeepinfer_cuda.a" 2>/dev/null | grep -c 'QMMA')," \
    "HGMMA (bf16 wgmma): $(cuobjdump --dump-sass "$BUILD/libdeepinfer_cuda.a" 2>/dev/null | grep -c 'HGMMA')" | tee -a "$log"
fi
grep -E "bytes stack frame" "$log" | grep -v " 0 bytes spill stores" | sort | uniq -c | head -10 >>"$OUT/device.txt"

stamp "gpu tests"
(cd "$BUILD" && ctest -L gpu -V --timeout 300 ${tests_regex:+-R "$tests_regex"}) >"$OUT/gpu_tests.log" 2>&1
tests_rc=$?
stamp "gpu tests rc=$tests_rc"

bench_rc=0
if [ "$roofline" = 1 ]; then
  stamp "roofline benchmark"
  timeout 300 "$BUILD/gpu/bench/roofline" --out "$OUT/roofline.json" $quick $gemm_only >"$OUT/roofline.log" 2>&1
  bench_rc=$?
  stamp "roofline rc=$bench_rc"
fi
if [ "$model_bench" = 1 ]; then
  stamp "whole-model benchmark (v4_decode)"
  timeout 360 "$BUILD/gpu/bench/v4_decode" --out "$OUT/v4_decode.json" $quick >"$OUT/v4_decode.log" 2>&1
  model_rc=$?
  stamp "v4_decode rc=$model_rc"
  [ "$model_rc" = 0 ] || bench_rc=$model_rc
fi

echo
echo "================ GPU tests (relative L2 vs the CPU reference; bound) ================"
grep -E "GPU_CHECK" "$OUT/gpu_tests.log" | sed -E 's/^[0-9]+: //; s/GPU_CHECK //' | awk '{printf "  %s\n", $0}'
grep -E "tests passed|tests failed|\(Failed\)|\*\*\*Failed|Exception" "$OUT/gpu_tests.log" | sed -E 's/^[0-9]+: //'
echo
if [ -f "$OUT/roofline.log" ]; then
  echo "================ roofline (tail of the benchmark log) ================"
  grep -E "^roofline:|^device:" "$OUT/roofline.log"
  tail -n 30 "$OUT/roofline.log"
fi
if [ -f "$OUT/v4_decode.log" ]; then
  echo "================ whole-model V4-Flash benchmark ================"
  tail -n 20 "$OUT/v4_decode.log"
fi
echo "build+tests+bench: $(($(date +%s) - t0)) s; tests rc=$tests_rc, bench rc=$bench_rc"
exit $((tests_rc != 0 || bench_rc != 0))
