#!/usr/bin/env bash
# One device call (one or two H200s): every `gpu` test binary that is packed (test_gpu and test_gpu_model split over
# two GPUs, then test_gpu_ep, test_gpu_dp_engine, test_gpu_comm on both; with one GPU the suites share it side by
# side (session 12; SERIAL_SUITES=1: in turn) and the 2-GPU suites are skipped, said in the summary), unless
# SKIP_SUITES=1, then the extra
# steps: EXTRA_GPU0 / EXTRA_GPU1, each "name|command" separated by ';' (commands see $b = the unpacked binaries and
# OUT = a folder inside the results, so tools/gpu/decode_switch_ab.sh's tables come back too). Everything lands in
# one $OUT/results.tar.gz (a call returns at most 8 files); a summary prints last.
#   usage (GPU machine, repo root, prebuilt binaries in .gpubin): [SKIP_SUITES=1] EXTRA_GPU0=... bash tools/gpu/device_call.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
res=/tmp/fin
export b=/tmp/deepinfer-bin
rm -rf "$res" && mkdir -p "$res/steps" "$b" "$OUT"
tar -xf .gpubin/bins.tar.xz -C "$b" || exit 1
export DEEPINFER_REQUIRE_GPU=1 DEEPINFER_SOURCE_OVERRIDE=$PWD NCCL_NVLS_ENABLE=0
nccl_lib=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$nccl_lib:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
run() {
  local name=$1 gpus=$2 limit=$3 s=$(date +%s); shift 3
  CUDA_VISIBLE_DEVICES=$gpus OUT=$res/steps timeout "$limit" "$@" >"$res/$name.log" 2>&1
  local rc=$?
  echo "$(printf "%-24s rc=%-4s %4ss  %s" "$name" "$rc" "$(($(date +%s) - s))" \
    "$(grep -hE '^\[  (PASSED|FAILED)  \]' "$res/$name.log" | tr '\n' ' ')")" >>"$res/summary.txt"
  tar -czf "$OUT/results.tar.gz" -C "$res" --exclude='*.ncu-rep' . 2>/dev/null
}
extras() {  # $1: GPU, $2: the list
  local e
  IFS=';' read -ra list <<<"${2//$'\n'/}"  # one line: read stops at a newline
  for e in "${list[@]}"; do
    [ -n "${e//[[:space:]]/}" ] || continue
    if [[ "$e" != *"|"* ]]; then  # a ';' inside a step's command splits it: the rest has no name (session 28, run 158)
      printf "%-24s rc=%-4s no 'name|' in '%s': a ';' inside a step? skipped\n" bad-step - "${e:0:60}" \
        >>"$res/summary.txt"
      continue
    fi
    run "${e%%|*}" "$1" 300 bash -c "${e#*|}"
  done
}
half_a='GpuEngine.*:V4GpuForward.*:GpuMoe.*'
suites=$([ "${SKIP_SUITES:-0}" = 1 ] && echo 0 || echo 1)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
second=$([ "$gpus" -ge 2 ] && echo 1 || echo 0)  # one GPU: the second list runs on GPU 0 after the first
first_half() {
  [ "$suites" = 1 ] && run gpu_tests 0 420 "$b/test_gpu" && run model_a 0 240 "$b/test_gpu_model" --gtest_filter="$half_a"
  extras 0 "${EXTRA_GPU0:-}"
}
second_half() {
  [ "$suites" = 1 ] && run model_b "$second" 380 "$b/test_gpu_model" --gtest_filter="-$half_a"
  extras "$second" "${EXTRA_GPU1:-}"
}
if [ "$second" = 1 ]; then
  first_half &
  second_half &
  wait
elif [ "${SERIAL_SUITES:-0}" != 1 ]; then
  # One GPU: the suites share it (they are CPU-reference-heavy and use a few GB; no test has a timing bound), then
  # the extra steps run alone, one after another, so benchmarks never share the GPU. SERIAL_SUITES=1: all in turn.
  # test_gpu alone on one side (~450 s beside the model suites since session 23; run 135 ran past a 420 s cap), both
  # halves of test_gpu_model on the other (~365 s; model_b alone ran past a 300 s cap in run 153, now 380).
  if [ "$suites" = 1 ]; then
    run gpu_tests 0 540 "$b/test_gpu" &
    (run model_b 0 380 "$b/test_gpu_model" --gtest_filter="-$half_a" &&
      run model_a 0 240 "$b/test_gpu_model" --gtest_filter="$half_a") &
    wait
  fi
  extras 0 "${EXTRA_GPU0:-}"
  extras 0 "${EXTRA_GPU1:-}"
else
  first_half
  second_half
fi
if [ "$suites" = 1 ] && [ "$gpus" -lt 2 ]; then
  echo "ep_tests / dp_engine_tests / comm: skipped (they need two GPUs; this machine has $gpus)" >>"$res/summary.txt"
elif [ "$suites" = 1 ]; then
  run ep_tests 0,1 300 "$b/test_gpu_ep"
  run dp_engine_tests 0,1 300 "$b/test_gpu_dp_engine"
  run comm 0,1 60 "$b/test_gpu_comm"
fi
tar -czf "$OUT/results.tar.gz" -C "$res" --exclude='*.ncu-rep' . 2>/dev/null  # after steps that ran side by side
echo "================ summary ($(($(date +%s) - t0)) s) ================"
cat "$res/summary.txt"
grep -hE "^\[  FAILED  \]" "$res"/*.log | sort -u | head -20
grep -hE "GPU_CHECK.*mismatches=[1-9]" "$res"/*.log | head -10
for f in "$res"/*ab*.log; do [ -f "$f" ] && { echo "-- $(basename "$f")"; tail -n 14 "$f"; }; done
for f in "$res"/*tail*.log; do [ -f "$f" ] && { echo "-- $(basename "$f")"; head -n 80 "$f"; }; done  # printed whole
true  # (the summary decides nothing: a missing *tail* log is not a failure)
