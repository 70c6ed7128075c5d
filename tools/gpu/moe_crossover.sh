#!/usr/bin/env bash
# Where the MoE should switch from the decode kernels to the grouped prefill kernel (moe_gpu.h
# moe_prefill_rows_per_expert; bench/gpu/NOTES.md "MoE path crossover"): the prefill of a 4K prompt in steps of
# CHUNKS rows on 16 layers (V4-Flash and V4.1-Flash widths), once with the decode kernels
# (DEEPINFER_MOE_PREFILL_ROWS_PER_EXPERT=4096) and once with the prefill kernel (=1), same call; the decode table of
# the same runs (batch 64 / 256) shows the two kernels at 1.5-6 pairs per expert.
#   usage (GPU machine, repo root, prebuilt binaries unpacked by run_bounded.sh):
#     [CHUNKS="256 512 1024 2048"] tools/gpu/moe_crossover.sh BIN_DIR
set -uo pipefail
bin=${1:-/tmp/deepinfer-bin}
out=${OUT:-$PWD/gpu-out}/crossover
mkdir -p "$out"
chunks=${CHUNKS:-256 512 1024 2048}
for fam in v4 v41; do
  for chunk in $chunks; do
    for thr in 4096 1; do
      DEEPINFER_MOE_PREFILL_ROWS_PER_EXPERT=$thr timeout 120 "$bin/v4_decode" --quick --pdl on --family $fam \
        --chunk $chunk --out "$out/${fam}_c${chunk}_t${thr}.json" >"$out/${fam}_c${chunk}_t${thr}.log" 2>&1 \
        || echo "${fam}_c${chunk}_t${thr} failed"
    done
  done
done
python3 - "$out" $chunks <<'PY'
import json, os, sys
d, chunks = sys.argv[1], [int(c) for c in sys.argv[2:]]
nan = float("nan")
print(f"{'family':6} {'rows':>6} {'pairs/expert':>12} {'decode kernels':>15} {'prefill kernel':>15} {'prefill/decode':>15}")
for fam, experts in (("v4", 256), ("v41", 384)):
    def load(chunk, thr):
        try:
            return json.load(open(os.path.join(d, f"{fam}_c{chunk}_t{thr}.json")))
        except Exception:
            return None
    for chunk in chunks:  # prefill tokens/s of the 4K prompt in steps of `chunk` rows
        r = [load(chunk, t) for t in (4096, 1)]
        v = [next((x["tokens_per_s"] for x in j["prefill"] if x["chunk"] == chunk), nan) if j else nan for j in r]
        print(f"{fam:6} {chunk:6} {chunk * 6 / experts:12.1f} {v[0]:12.0f} t/s {v[1]:12.0f} t/s {v[1] / v[0]:15.3f}")
    r = [load(chunks[0], t) for t in (4096, 1)]
    for batch in (64, 256):  # decode step at 4K context
        v = [next((x["step_ms"] for x in j["decode"] if x["batch"] == batch and x["context"] == 4096), nan) if j else nan
             for j in r]
        print(f"{fam:6} {batch:6} {batch * 6 / experts:12.1f} {v[0]:12.2f} ms {v[1]:12.2f} ms {v[0] / v[1]:15.3f}")
PY
