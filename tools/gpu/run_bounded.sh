#!/usr/bin/env bash
# One bounded device call over the prebuilt binaries (tools/gpu/pack_prebuilt.sh; carry .gpubin) for sessions with
# little device time: every step has its own timeout, the logs are archived into $OUT/results.tar.gz after EVERY
# step (so a call cut short still returns what finished, and $OUT holds one file), and a summary table comes last.
#   usage (GPU machine, repo root): tools/gpu/run_bounded.sh [--one-gpu] [--only "STEP ..."]
#     kind nvidia-h200-x2 by default: the 1-GPU suites on GPU 0, then the 2-GPU communicator, EP2 / DP2 tests and
#     the full-depth V4-Flash EP2 benchmark; --one-gpu leaves the 2-GPU steps out; --only runs the named steps
#     (names as in the summary: gpu_tests gpu_model_tests v4_decode_pdl v4_decode_unfused comm comm_launch
#     v4_ep_decode ep_tests dp_engine_tests v4_ep_cp_prefill), in this script's order. test_gpu_ep holds the EP2 / DP2 / CP2
#     equality tests, test_gpu_dp_engine the data-parallel engine on two GPUs vs one.
set -uo pipefail
two_gpus=1
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --one-gpu) two_gpus=0 ;;
    --only) only=" $2 "; shift ;;
  esac
  shift
done
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
res=/tmp/deepinfer-results
rm -rf "$res" && mkdir -p "$res"
export DEEPINFER_REQUIRE_GPU=1 DEEPINFER_SOURCE_OVERRIDE=$PWD NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nccl_lib=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
bin=/tmp/deepinfer-bin
mkdir -p "$bin" && tar -xf .gpubin/bins.tar.xz -C "$bin" || { echo "no .gpubin/bins.tar.xz"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$res/device.log" 2>&1
t0=$(date +%s)
summary=()
# step NAME TIMEOUT_S CMD...: runs CMD with its output in NAME.log, records rc and seconds, re-archives.
step() {
  local name=$1 limit=$2; shift 2
  if [ -n "$only" ] && [[ "$only" != *" $name "* ]]; then return 0; fi
  local s=$(date +%s)
  timeout "$limit" "$@" >"$res/$name.log" 2>&1
  local rc=$?
  local line
  line=$(printf "%-26s rc=%-4s %4ss  %s" "$name" "$rc" "$(($(date +%s) - s))" \
    "$(grep -hE '^\[  (PASSED|FAILED)  \]' "$res/$name.log" | tr '\n' ' ')")
  summary+=("$line")
  echo "[+$(($(date +%s) - t0))s] $line"
  tar -czf "$OUT/results.tar.gz" -C "$res" .
}
step gpu_tests 120 "$bin/test_gpu"
step gpu_model_tests 240 "$bin/test_gpu_model"
step v4_decode_pdl 120 "$bin/v4_decode" --quick --pdl both --out "$res/v4_decode_pdl.json"
DEEPINFER_DECODE_FUSED=0 step v4_decode_unfused 90 "$bin/v4_decode" --quick --out "$res/v4_decode_unfused.json"
if [ "$two_gpus" = 1 ]; then
  export LD_LIBRARY_PATH=$nccl_lib:$LD_LIBRARY_PATH
  step comm 60 "$bin/test_gpu_comm"
  step comm_launch 60 "$bin/deepinfer" launch --nproc 2 -- "$bin/test_gpu_comm" --gtest_filter='CommProcess.*'
  step v4_ep_decode 200 "$bin/v4_ep_decode" --ep 2 --layers 43 --out "$res/v4_ep_decode.json"
  step ep_tests 300 "$bin/test_gpu_ep"
  step dp_engine_tests 240 "$bin/test_gpu_dp_engine"
  step v4_ep_cp_prefill 300 "$bin/v4_ep_decode" --ep 2 --layers 43 --chunk 2048 --cp-prefill 32768 \
    --out "$res/v4_ep_cp_prefill.json"
fi
echo
echo "================ summary ================"
printf '%s\n' "${summary[@]}"
grep -hE "FAILED|Failure" "$res"/gpu_tests.log "$res"/gpu_model_tests.log "$res"/ep_tests.log \
  "$res"/dp_engine_tests.log 2>/dev/null | head -20
for f in v4_decode_pdl v4_decode_unfused v4_ep_decode v4_ep_cp_prefill; do
  [ -f "$res/$f.log" ] && { echo "---- $f (tail)"; tail -n 14 "$res/$f.log"; }
done
