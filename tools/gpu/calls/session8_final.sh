#!/usr/bin/env bash
# Session 8, final call (two H200s): every `gpu` test binary of HEAD (test_gpu, test_gpu_model split over the two
# GPUs, then test_gpu_ep, test_gpu_dp_engine, test_gpu_comm and the DP2 CLI on both), the new switches' tests and
# same-call A/B timings (SWITCH_AB: "VAR:values" pairs for tools/gpu/decode_switch_ab.sh). Logs in
# $OUT/results.tar.gz, a summary last.
#   usage (GPU machine, repo root, prebuilt binaries in .gpubin): bash tools/gpu/calls/session8_final.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
res=/tmp/fin bin=/tmp/deepinfer-bin
rm -rf "$res" && mkdir -p "$res" "$bin" "$OUT"
tar -xf .gpubin/bins.tar.xz -C "$bin" || exit 1
export DEEPINFER_REQUIRE_GPU=1 DEEPINFER_SOURCE_OVERRIDE=$PWD NCCL_NVLS_ENABLE=0
nccl_lib=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$nccl_lib:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
run() {
  local name=$1 gpus=$2 limit=$3 s=$(date +%s); shift 3
  CUDA_VISIBLE_DEVICES=$gpus timeout "$limit" "$@" >"$res/$name.log" 2>&1
  local rc=$?
  echo "$(printf "%-24s rc=%-4s %4ss  %s" "$name" "$rc" "$(($(date +%s) - s))" \
    "$(grep -hE '^\[  (PASSED|FAILED)  \]' "$res/$name.log" | tr '\n' ' ')")" >>"$res/summary.txt"
  tar -czf "$OUT/results.tar.gz" -C "$res" --exclude='*.ncu-rep' . 2>/dev/null
}
half_a='GpuEngine.*:V4GpuForward.*:GpuMoe.*'
(
  run gpu_tests 0 240 "$bin/test_gpu"
  run model_a 0 240 "$bin/test_gpu_model" --gtest_filter="$half_a"
  # EXTRA_GPU0: more one-GPU steps, "name|env VAR=x ... cmd args" separated by ';' (the helpers' switches).
  IFS=';' read -ra extra <<<"${EXTRA_GPU0:-}"
  for e in "${extra[@]}"; do [ -n "$e" ] && run "${e%%|*}" 0 300 bash -c "${e#*|}"; done
) &
(
  run model_b 1 300 "$bin/test_gpu_model" --gtest_filter="-$half_a"
  IFS=';' read -ra extra <<<"${EXTRA_GPU1:-}"
  for e in "${extra[@]}"; do [ -n "$e" ] && run "${e%%|*}" 1 300 bash -c "${e#*|}"; done
) &
wait
run ep_tests 0,1 300 "$bin/test_gpu_ep"
run dp_engine_tests 0,1 300 "$bin/test_gpu_dp_engine"
run comm 0,1 60 "$bin/test_gpu_comm"
echo "================ summary ($(($(date +%s) - t0)) s) ================"
cat "$res/summary.txt"
grep -hE "^\[  FAILED  \]" "$res"/*.log | sort -u | head -20
for f in "$res"/*ab*.log; do [ -f "$f" ] && { echo "-- $(basename "$f")"; tail -n 12 "$f"; }; done
