#!/usr/bin/env bash
# Session 9, second call (two H200s): same-call timings of session 8's switches. GPU 0: DEEPINFER_STREAM_FP4
# (default vs wgmma) through tools/gpu/decode_switch_ab.sh, then the roofline GEMM rows (the wgmma stream row beside
# today's). GPU 1: DEEPINFER_HC_SITE_TAIL (default vs spread), then the packed FP8 KV record against bf16 pools
# (DEEPINFER_KV_FORMAT, V4-Flash 8 layers, 4K and 64K context, 2048-row prefill chunks), alternating twice.
#   usage (GPU machine, repo root, prebuilt binaries in .gpubin): bash tools/gpu/calls/session9_ab.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
bin=/tmp/deepinfer-bin
mkdir -p "$bin" "$OUT" && tar -xf .gpubin/bins.tar.xz -C "$bin" || exit 1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} DEEPINFER_REQUIRE_GPU=1
t0=$(date +%s)
(
  export CUDA_VISIBLE_DEVICES=0
  bash tools/gpu/decode_switch_ab.sh "$bin" DEEPINFER_STREAM_FP4 "default wgmma" 2 >"$OUT/ab_stream_fp4.log" 2>&1
  timeout 200 "$bin/roofline" --gemm-only --out "$OUT/roofline_gemm.json" >"$OUT/roofline_gemm.log" 2>&1
  echo "gpu0 done $(($(date +%s) - t0)) s" >>"$OUT/times.txt"
) &
(
  export CUDA_VISIBLE_DEVICES=1
  bash tools/gpu/decode_switch_ab.sh "$bin" DEEPINFER_HC_SITE_TAIL "default spread" 2 >"$OUT/ab_hc_site_tail.log" 2>&1
  for i in 1 2; do
    for f in bf16 fp8; do
      DEEPINFER_KV_FORMAT=$f timeout 200 "$bin/v4_decode" --layers 8 --chunk 2048 --pdl on \
        --out "$OUT/kv_${f}_$i.json" >"$OUT/kv_${f}_$i.log" 2>&1 || echo "kv $f $i rc=$?" >>"$OUT/times.txt"
    done
  done
  echo "gpu1 done $(($(date +%s) - t0)) s" >>"$OUT/times.txt"
) &
wait
cat "$OUT/times.txt"
cat "$OUT/ab_stream_fp4.log" "$OUT/ab_hc_site_tail.log"
python3 - "$OUT" <<'PY'
import json, os, sys
d = sys.argv[1]
print(f"{'KV run':12} {'ctx':>6} {'b1 ms':>8} {'b8 ms':>8} {'b64 ms':>8} {'b256 ms':>8} {'GB/step b1':>11}")
for f in sorted(x for x in os.listdir(d) if x.startswith("kv_") and x.endswith(".json")):
    j = json.load(open(os.path.join(d, f)))
    for ctx in (4096, 65536):
        rows = {x["batch"]: x for x in j.get("decode", []) if x.get("context") == ctx}
        if not rows:
            continue
        gb = rows.get(1, {}).get("bytes_per_step", float("nan")) / 1e9 if 1 in rows else float("nan")
        print(f"{f[:-5]:12} {ctx:6} " + " ".join(f"{rows[b]['step_ms'] if b in rows else float('nan'):8.3f}"
              for b in (1, 8, 64, 256)) + f" {gb:11.3f}")
    pre = [(x.get("prompt"), x.get("chunk"), x.get("tokens_per_s")) for x in j.get("prefill", [])]
    print(f"{'':12} prefill {pre}")
grep = [l for l in open(os.path.join(d, "roofline_gemm.log")) if "stream" in l] if os.path.exists(os.path.join(d, "roofline_gemm.log")) else []
print("".join(grep[:40]))
PY
