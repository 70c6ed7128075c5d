#!/usr/bin/env bash
# Where the MoE should switch from the decode kernels to the grouped prefill kernel (moe_gpu.h
# moe_prefill_rows_per_expert; bench/gpu/NOTES.md "MoE path crossover"): the prefill of a 4K prompt in steps of
# 1024 / 2048 / 4096 rows on 16 layers (V4-Flash and V4.1-Flash widths), once with the default threshold and once
# with DEEPINFER_MOE_PREFILL_ROWS_PER_EXPERT=8 (the prefill kernel at every one of these sizes), same call.
#   usage (GPU machine, repo root, prebuilt binaries unpacked by run_bounded.sh): tools/gpu/moe_crossover.sh BIN_DIR
set -uo pipefail
bin=${1:-/tmp/deepinfer-bin}
out=${OUT:-$PWD/gpu-out}/crossover
mkdir -p "$out"
for fam in v4 v41; do
  for chunk in 1024 2048 4096; do
    for thr in 64 8; do
      DEEPINFER_MOE_PREFILL_ROWS_PER_EXPERT=$thr timeout 120 "$bin/v4_decode" --quick --pdl on --family $fam \
        --chunk $chunk --out "$out/${fam}_c${chunk}_t${thr}.json" >"$out/${fam}_c${chunk}_t${thr}.log" 2>&1 \
        || echo "${fam}_c${chunk}_t${thr} failed"
    done
  done
done
python3 - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
print(f"{'family':6} {'chunk':>6} {'pairs/expert':>12} {'decode kernels tok/s':>21} {'prefill kernel tok/s':>21} {'prefill/decode':>15}")
for fam, experts in (("v4", 256), ("v41", 384)):
    for chunk in (1024, 2048, 4096):
        r = {}
        for thr in (64, 8):
            try:
                rows = json.load(open(os.path.join(d, f"{fam}_c{chunk}_t{thr}.json")))["prefill"]
                r[thr] = next(x["tokens_per_s"] for x in rows if x["chunk"] == chunk)
            except Exception:
                r[thr] = float("nan")
        ppe = chunk * 6 / experts
        # Threshold 64 runs the decode kernels below 64 pairs per expert, the prefill kernel from it on.
        dec = r[64] if ppe < 64 else float("nan")
        print(f"{fam:6} {chunk:6} {ppe:12.1f} {dec:21.0f} {r[8]:21.0f} {r[8] / dec if dec == dec else float('nan'):15.3f}")
PY
