#!/usr/bin/env bash
# One bounded device call over the prebuilt binaries (tools/gpu/pack_prebuilt.sh; carry .gpubin) for sessions with
# little device time: every step has its own timeout, the logs are archived into $OUT/results.tar.gz after EVERY
# step (so a call cut short still returns what finished, and $OUT holds one file), and a summary table comes last.
#   usage (GPU machine, repo root): tools/gpu/run_bounded.sh [--one-gpu] [--only "STEP ..."]
#     kind nvidia-h200-x2 by default: the 1-GPU suites on GPU 0, then the 2-GPU communicator, EP2 / DP2 tests and
#     the full-depth V4-Flash EP2 benchmark; --one-gpu leaves the 2-GPU steps out; --only runs the named steps
#     (names as in the summary: gpu_tests gpu_model_tests model_tests_index_new gpu_tests_blk128 model_tests_blk128 v4_decode_pdl v4_decode_full v4_decode_unfused v4_decode_v9
#     roofline_prefill roofline_fp8_mid profile_b1 profile_b64 nsys_b1 index_select_ab stream_loop_ab moe_crossover ncu_prefill ncu_decode_b1 deepgemm_bind_local comm comm_launch
#     v4_ep_decode v4_ep_eplb_r0 v4_ep_eplb_r16 ep_tests ep_tests_bf16 ep_dispatch_fp8 ep_dispatch_bf16 dp_engine_tests dp_cli dp_cli_rebalance v4_ep_cp_prefill cp_prefill_thr16 v41_cp_prefill_thr16 v41_ep_cp_prefill), in this script's order. test_gpu_ep holds the EP2 /
#     DP2 / CP2 equality tests, test_gpu_dp_engine the data-parallel engine on two GPUs vs one, dp_cli the same through
#     the CLI (deepinfer generate --device cuda --data-parallel 2 vs --data-parallel 1).
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
# RESULTS_DIR / BIN_DIR: two calls side by side (one per GPU, CUDA_VISIBLE_DEVICES) need their own directories.
res=${RESULTS_DIR:-/tmp/deepinfer-results}
rm -rf "$res" && mkdir -p "$res"
export DEEPINFER_REQUIRE_GPU=1 DEEPINFER_SOURCE_OVERRIDE=$PWD NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nccl_lib=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)
bin=${BIN_DIR:-/tmp/deepinfer-bin}
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
  tar -czf "$OUT/${RESULTS_NAME:-results}.tar.gz" -C "$res" .
}
step gpu_tests 200 "$bin/test_gpu"
step gpu_model_tests 330 "$bin/test_gpu_model"
# Switches that are off by default, through the tests they touch: the indexer's decode selection (=new) and the
# decode stream GEMVs' 128-block K loop (=blk128).
DEEPINFER_INDEX_SELECT=new step model_tests_index_new 300 "$bin/test_gpu_model" \
  --gtest_filter='GpuDecodeFused.*:GpuCompressorIndexer.*'
DEEPINFER_STREAM_LOOP=blk128 step gpu_tests_blk128 300 "$bin/test_gpu" --gtest_filter='GpuFp8Gemm.*:GpuMxfp4Experts.*'
DEEPINFER_STREAM_LOOP=blk128 step model_tests_blk128 300 "$bin/test_gpu_model" --gtest_filter='GpuMoe.*:V4GpuForward.*'
step v4_decode_pdl 120 "$bin/v4_decode" --quick --pdl both --out "$res/v4_decode_pdl.json"
# The full table (4K and 64K context; 4K and 32K prompts in chunks of 256 and of 2048, the engine's default
# max_batch_tokens), PDL on.
step v4_decode_full 300 "$bin/v4_decode" --chunk 2048 --pdl on --out "$res/v4_decode_full.json"
DEEPINFER_DECODE_FUSED=0 step v4_decode_unfused 90 "$bin/v4_decode" --quick --out "$res/v4_decode_unfused.json"
# The batch-1 MoE decode v9 (bench/gpu/NOTES.md "Decode MoE v9"): the same table with DEEPINFER_MOE_DECODE=v9, next
# to v4_decode_pdl (v8, the default) of the same call.
DEEPINFER_MOE_DECODE=v9 step v4_decode_v9 150 "$bin/v4_decode" --quick --pdl both --out "$res/v4_decode_v9.json"
# The grouped MXFP4 prefill kernels v3 / v4 (clusters of 2 / 4 / 8) against the dense FP8 rate, same run.
step roofline_prefill 180 "$bin/roofline" --prefill-only --out "$res/roofline_prefill.json"
# The FP8 GEMMs at 8-256 rows: today's kernels vs stream_mid (DEEPINFER_FP8_GEMM_MID=new) and its k-split form
# (=split), bench/gpu/NOTES.md "FP8 GEMMs at 9-256 rows".
step roofline_fp8_mid 180 "$bin/roofline" --fp8-mid-only --out "$res/roofline_fp8_mid.json"
# One decode step kernel by kernel under ncu (tools/gpu/profile_decode.sh; 4 V4-Flash layers), batch 1 and 64.
step profile_b1 200 env OUT="$res" bash tools/gpu/profile_decode.sh 1 4
step profile_b64 200 env OUT="$res" bash tools/gpu/profile_decode.sh 64 4
# One batch-1 decode step's real timeline under Nsight Systems (tools/gpu/nsys_decode.sh; 16 layers).
step nsys_b1 200 env OUT="$res" bash tools/gpu/nsys_decode.sh 1 16
# Same-call A/B of decode switches (tools/gpu/decode_switch_ab.sh): the indexer's decode selection forms and the
# stream GEMVs' K loop (DEEPINFER_STREAM_LOOP).
step index_select_ab 200 env OUT="$res" bash tools/gpu/decode_switch_ab.sh "$bin" DEEPINFER_INDEX_SELECT "old bins new" 2
step stream_loop_ab 200 env OUT="$res" bash tools/gpu/decode_switch_ab.sh "$bin" DEEPINFER_STREAM_LOOP "generic blk128" 2
# The MoE's decode / prefill kernel crossover (tools/gpu/moe_crossover.sh): 4K prefill in steps of 1024-4096 rows
# with the default threshold and with the prefill kernel forced, V4 and V4.1 widths.
step moe_crossover 300 env OUT="$res" bash tools/gpu/moe_crossover.sh "$bin"
# Nsight Compute's full report of the grouped MXFP4 prefill kernel v5 (tools/gpu/ncu_prefill.sh).
step ncu_prefill 320 env OUT="$res" bash tools/gpu/ncu_prefill.sh v5
# ncu --set full of the batch-1 decode step's latency and MoE kernels (tools/gpu/ncu_decode_kernels.sh).
step ncu_decode_b1 300 env OUT="$res" bash tools/gpu/ncu_decode_kernels.sh
# DeepGEMM's JIT runtime crash (tools/gpu/deepgemm_bind_local.sh; needs .whl carried): rebuilt with local template
# instantiations, then the anchor in the time left.
step deepgemm_bind_local 330 env OUT="$res" bash tools/gpu/deepgemm_bind_local.sh 240
if [ "$two_gpus" = 1 ]; then
  export LD_LIBRARY_PATH=$nccl_lib:$LD_LIBRARY_PATH
  step comm 60 "$bin/test_gpu_comm"
  step comm_launch 60 "$bin/deepinfer" launch --nproc 2 -- "$bin/test_gpu_comm" --gtest_filter='CommProcess.*'
  step v4_ep_decode 200 "$bin/v4_ep_decode" --ep 2 --layers 43 --out "$res/v4_ep_decode.json"
  # EPLB under a skewed expert load (docs/parallel.md "EPLB"): live moe_lb and tok/s/GPU before and after a
  # rebalancing with weight moves, without and with 16 redundant expert slots per layer.
  step v4_ep_eplb_r0 240 "$bin/v4_ep_decode" --ep 2 --layers 43 --skew zipf:1 --rebalance \
    --out "$res/v4_ep_eplb_r0.json"
  step v4_ep_eplb_r16 240 "$bin/v4_ep_decode" --ep 2 --layers 43 --skew zipf:1 --eplb-redundant 16 --rebalance \
    --out "$res/v4_ep_eplb_r16.json"
  step ep_tests 420 "$bin/test_gpu_ep"
  # The EP exchange's bf16 dispatch (DEEPINFER_EP_DISPATCH=bf16; FP8 is the default since session 7) through the
  # model-level equality tests, and the two forms' speed on full-depth V4-Flash EP2 (docs/parallel.md "FP8 dispatch").
  DEEPINFER_EP_DISPATCH=bf16 step ep_tests_bf16 300 "$bin/test_gpu_ep" --gtest_filter='EpModel.*:CpModel.*'
  step ep_dispatch_fp8 200 "$bin/v4_ep_decode" --ep 2 --layers 43 --out "$res/ep_dispatch_fp8.json"
  DEEPINFER_EP_DISPATCH=bf16 step ep_dispatch_bf16 200 "$bin/v4_ep_decode" --ep 2 --layers 43 \
    --out "$res/ep_dispatch_bf16.json"
  step dp_engine_tests 360 "$bin/test_gpu_dp_engine"
  # The CLI (docs/data_parallel.md "From the CLI"): `deepinfer generate --device cuda --data-parallel 2` on the GPU
  # test checkpoint, then the same command with --data-parallel 1. Greedy requests in batch-invariant mode: the two
  # outputs must be identical (the DP2 engine's steps equal the one-GPU engine's bit for bit).
  dp_cli() {
    local bin=$1 res=$2 model=/tmp/deepinfer_v4_gpu_model n rc=0
    ldd "$bin/deepinfer" | grep -E "nccl|not found"
    [ -f "$model/config.json" ] || python3 tools/fixtures/make_gpu_model.py --family v4 --out "$model" || return 1
    python3 - >"$res/dp_cli_requests.jsonl" <<'PY'
import json, random
rng = random.Random(11)
for i in range(16):
    print(json.dumps({"prompt_token_ids": [rng.randrange(3, 1024) for _ in range(rng.randrange(5, 60))],
                      "max_tokens": 16, "temperature": 0}))
PY
    local gen=(generate --model "$model" --device cuda --batch-invariant --input "$res/dp_cli_requests.jsonl"
      --max-model-len 256 --max-num-seqs 16 --max-batch-tokens 48 --prefill-chunk 16)
    # DP_CLI_DP2_FLAGS: extra flags of the two-rank runs (dp_cli_rebalance: EPLB moves every 8 lockstep steps,
    # docs/data_parallel.md "The rebalancing check on two GPUs"); the one-rank run is the reference either way.
    local dp2=(--data-parallel 2 ${DP_CLI_DP2_FLAGS:-})
    echo "== deepinfer generate --device cuda ${dp2[*]}"
    "$bin/deepinfer" "${gen[@]}" "${dp2[@]}" --output "$res/dp_cli_dp2.jsonl" || rc=1
    echo "== deepinfer generate --device cuda --data-parallel 1"
    "$bin/deepinfer" "${gen[@]}" --data-parallel 1 --output "$res/dp_cli_dp1.jsonl" || rc=1
    # The ranks as processes (docs/data_parallel.md "Ranks as processes"): rank 0 admits and prints, each process
    # builds its own GPU rank, the NCCL id travels over the launch's TCP group.
    echo "== deepinfer launch --nproc 2 -- deepinfer generate --device cuda ${dp2[*]}"
    "$bin/deepinfer" launch --nproc 2 -- "$bin/deepinfer" "${gen[@]}" "${dp2[@]}" \
      --output "$res/dp_cli_mp2.jsonl" || rc=1
    [ "$rc" = 0 ] || { echo "dp_cli: a deepinfer run failed"; return 1; }
    python3 - "$res/dp_cli_dp1.jsonl" "$res/dp_cli_dp2.jsonl" "$res/dp_cli_mp2.jsonl" <<'PY'
import json, sys
one = [json.loads(l) for l in open(sys.argv[1])]
key = lambda o: (o.get("token_ids"), o.get("finish_reason"), o.get("text"))
ok = len(one) > 0
for path, what in zip(sys.argv[2:], ["--data-parallel 2 (threads)", "launch --nproc 2 (processes)"]):
    other = [json.loads(l) for l in open(path)]
    same = sum(key(a) == key(b) for a, b in zip(other, one))
    print(f"dp_cli: greedy requests in batch-invariant mode, identical outputs expected: {same} of {len(one)} "
          f"identical (token ids, finish reason, text) between {what} ({len(other)} lines) and --data-parallel 1")
    for i, (a, b) in enumerate(zip(other, one)):
        if key(a) != key(b):
            print(f"  request {i}: {a.get('finish_reason')} {a.get('token_ids')} {a.get('message', '')}\n"
                  f"    dp1      {b.get('finish_reason')} {b.get('token_ids')} {b.get('message', '')}")
    ok = ok and same == len(one) == len(other)
sys.exit(0 if ok else 1)
PY
  }
  export -f dp_cli
  step dp_cli 120 bash -c 'dp_cli "$@"' dp_cli "$bin" "$res"
  DP_CLI_DP2_FLAGS="--expert-parallel 2 --eplb-window 8 --eplb-rebalance-steps 8 --eplb-rebalance-min-gain 0" \
    step dp_cli_rebalance 150 bash -c 'dp_cli "$@"' dp_cli "$bin" "$res"
  step v4_ep_cp_prefill 300 "$bin/v4_ep_decode" --ep 2 --layers 43 --chunk 2048 --cp-prefill 32768 \
    --out "$res/v4_ep_cp_prefill.json"
  # CP2 prefill with the MoE prefill kernel from 16 pairs per expert (moe_gpu.h moe_prefill_rows_per_expert; at the
  # default 64 the 2048-row chunks' 1024-row shares run the decode kernels, run 45).
  DEEPINFER_MOE_PREFILL_ROWS_PER_EXPERT=16 step cp_prefill_thr16 200 "$bin/v4_ep_decode" --ep 2 --layers 16 \
    --chunk 2048 --cp-prefill 32768 --out "$res/cp_prefill_thr16.json"
  DEEPINFER_MOE_PREFILL_ROWS_PER_EXPERT=16 step v41_cp_prefill_thr16 200 "$bin/v4_ep_decode" --family v41 --ep 2 \
    --layers 16 --chunk 2048 --cp-prefill 32768 --out "$res/v41_cp_prefill_thr16.json"
  step v41_ep_cp_prefill 300 "$bin/v4_ep_decode" --family v41 --ep 2 --layers 16 --chunk 2048 --cp-prefill 32768 \
    --out "$res/v41_ep_cp_prefill.json"
fi
echo
echo "================ summary ================"
printf '%s\n' "${summary[@]}"
grep -hE "FAILED|Failure" "$res"/gpu_tests.log "$res"/gpu_model_tests.log "$res"/ep_tests.log \
  "$res"/dp_engine_tests.log 2>/dev/null | head -20
[ -f "$res/dp_cli.log" ] && grep -hE "^dp_cli|^  request|\[generate\] rank|error" "$res/dp_cli.log" | head -20
for f in v4_decode_pdl v4_decode_unfused v4_decode_v9 v4_ep_decode v4_ep_eplb_r0 v4_ep_eplb_r16 v4_ep_cp_prefill; do
  [ -f "$res/$f.log" ] && { echo "---- $f (tail)"; tail -n 14 "$res/$f.log"; }
done
[ -f "$res/roofline_prefill.log" ] && { echo "---- roofline_prefill"; grep -E "dense FP8|prefill|v3 /|v4" \
  "$res/roofline_prefill.log" | head -30; }
for f in profile_b1 profile_b64; do
  [ -f "$res/$f.log" ] && { echo "---- $f"; head -n 16 "$res/$f.log"; }
done
[ -f "$res/deepgemm_bind_local.log" ] && { echo "---- deepgemm_bind_local"; grep -E "^\[bind-local|exports|rc=" \
  "$res/deepgemm_bind_local.log" | tail -12; }
