#!/usr/bin/env bash
# The MoE decode / prefill threshold flip on two H200s (issue 4, bench/gpu/NOTES.md "MoE path crossover"): the
# suites that reach the MoE with DEEPINFER_MOE_PREFILL_ROWS_PER_EXPERT=1 (the prefill kernel from one pair per expert)
# and the threshold-pinned tests at the default, with prefill v8's ncu stall table beside them on the second GPU.
#   usage (GPU machine with two GPUs, repo root, prebuilt binaries in .gpubin):  bash tools/gpu/moe_threshold_check.sh
#   output: $OUT/results.tar.gz (every log), a summary table last.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
res=/tmp/thr-results bin=/tmp/deepinfer-bin
rm -rf "$res" && mkdir -p "$res" "$bin" "$OUT"
tar -xf .gpubin/bins.tar.xz -C "$bin" || exit 1
export DEEPINFER_REQUIRE_GPU=1 DEEPINFER_SOURCE_OVERRIDE=$PWD NCCL_NVLS_ENABLE=0
nccl_lib=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$nccl_lib:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
# run NAME GPU(S) TIMEOUT ENV... -- CMD...: one step, its log in NAME.log.
run() {
  local name=$1 gpus=$2 limit=$3 s=$(date +%s); shift 3
  CUDA_VISIBLE_DEVICES=$gpus timeout "$limit" env "$@" >"$res/$name.log" 2>&1
  local rc=$?
  echo "$(printf "%-22s rc=%-4s %4ss  %s" "$name" "$rc" "$(($(date +%s) - s))" \
    "$(grep -hE '^\[  (PASSED|FAILED)  \]' "$res/$name.log" | tr '\n' ' ')")" >>"$res/summary.txt"
  tar -czf "$OUT/results.tar.gz" -C "$res" .
}
half_a='GpuEngine.*:V4GpuForward.*:GpuMoe.*'
T1=DEEPINFER_MOE_PREFILL_ROWS_PER_EXPERT=1
# Phase 1, one GPU each: test_gpu_model with the threshold at 1, split in two halves.
run model_thr1_a 0 280 $T1 "$bin/test_gpu_model" --gtest_filter="$half_a" &
run model_thr1_b 1 280 $T1 "$bin/test_gpu_model" --gtest_filter="-$half_a"
wait
# Phase 2: the pinned GpuMoe tests at the default 64 on GPU 0; prefill v8's stall table on GPU 1.
run moe_default 0 150 DEEPINFER_X=0 "$bin/test_gpu_model" --gtest_filter='GpuMoe.*' &
CUDA_VISIBLE_DEVICES=1 OUT=$res NCU_EXTRA="--print-details all" timeout 200 bash tools/gpu/ncu_prefill.sh v8 \
  >"$res/ncu_v8.log" 2>&1
wait
# Phase 3, both GPUs: the EP / CP tests with the threshold at 1, then the CP greedy tests at the default.
run ep_thr1 0,1 300 $T1 "$bin/test_gpu_ep"
run cp_greedy_default 0,1 120 DEEPINFER_X=0 "$bin/test_gpu_ep" --gtest_filter='CpModel.*Greedy*'
echo "================ summary ($(($(date +%s) - t0)) s) ================"
cat "$res/summary.txt"
grep -hE "^\[  FAILED  \]|Failure|margin|bound" "$res"/*.log | head -30
tail -n 3 "$res/ncu_v8.log"
