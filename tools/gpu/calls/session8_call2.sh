#!/usr/bin/env bash
# Session 8, call 2 (two H200s): the flipped MoE threshold's default through the MoE / forward / engine tests and
# the decode table (V4, V4.1), per-instruction stall samples of prefill v7 and of the batch-1 decode streams, and
# CP2 prefill at the default threshold. Logs in $OUT/results.tar.gz, a summary last.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
res=/tmp/c2 bin=/tmp/deepinfer-bin
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
  echo "$(printf "%-22s rc=%-4s %4ss  %s" "$name" "$rc" "$(($(date +%s) - s))" \
    "$(grep -hE '^\[  (PASSED|FAILED)  \]' "$res/$name.log" | tr '\n' ' ')")" >>"$res/summary.txt"
  tar -czf "$OUT/results.tar.gz" -C "$res" . 2>/dev/null
}
(
  run model_moe_fwd 0 200 "$bin/test_gpu_model" --gtest_filter='GpuMoe.*:V4GpuForward.*:GpuEngine.*'
  run v4_decode 0 120 "$bin/v4_decode" --quick --pdl on --out "$res/v4_decode.json"
  run v41_decode 0 120 "$bin/v4_decode" --quick --pdl on --family v41 --out "$res/v41_decode.json"
) &
(
  export OUT=$res
  run ncu_v7 1 200 bash tools/gpu/ncu_sass_stalls.sh prefill_v7 mxfp4_prefill_v7_kernel 0 -- \
    "$bin/roofline" --prefill-only --quick --out /tmp/ncu_r.json
  NCU_EXTRA="--profile-from-start off --graph-profiling node" run ncu_stream_a 1 150 \
    bash tools/gpu/ncu_sass_stalls.sh stream_a stream_gemm_kernel 0 -- "$bin/v4_decode" --quick --layers 4 --profile-step 1
  NCU_EXTRA="--profile-from-start off --graph-profiling node" run ncu_stream_b 1 150 \
    bash tools/gpu/ncu_sass_stalls.sh stream_b stream_gemm_kernel 5 -- "$bin/v4_decode" --quick --layers 4 --profile-step 1
)
wait
run cp_prefill_v4 0,1 200 "$bin/v4_ep_decode" --ep 2 --layers 16 --chunk 2048 --cp-prefill 32768 --out "$res/cp_v4.json"
run cp_prefill_v41 0,1 200 "$bin/v4_ep_decode" --family v41 --ep 2 --layers 16 --chunk 2048 --cp-prefill 32768 \
  --out "$res/cp_v41.json"
echo "================ summary ($(($(date +%s) - t0)) s) ================"
cat "$res/summary.txt"
grep -hE "^\[  FAILED  \]" "$res"/*.log | head
for f in v4_decode v41_decode; do echo "-- $f"; sed -n 3,9p "$res/$f.log"; done
for f in cp_prefill_v4 cp_prefill_v41; do echo "-- $f"; grep -iE "cp|prefill" "$res/$f.log" | tail -6; done
for f in prefill_v7 stream_a stream_b; do echo "-- $f"; head -c 1800 "$res/ncu_sass_$f.txt"; echo; done
