#!/usr/bin/env bash
# One batch-B decode step's real timeline (issue 4, the batch-1 gap): Nsight Systems traces every node of the
# step's CUDA graph as it runs (PDL overlap and launch gaps included, unlike ncu's one-kernel-at-a-time replay in
# profile_decode.sh), then tools/gpu/timeline_table.py prints per kernel name: launches, summed busy time, and the
# step's span, busy union and idle gaps.
#   usage (GPU machine, repo root, prebuilt binaries from .gpubin): bash tools/gpu/nsys_decode.sh [BATCH (1)] [LAYERS (16)]
#   output: $OUT/nsys_b<B>.csv (nsys cuda_gpu_trace), $OUT/nsys_b<B>.txt (the table), $OUT/nsys_b<B>_sequence.txt
#   (every activity in start order)
set -uo pipefail
B=${1:-1}
LAYERS=${2:-16}
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
bin=/tmp/deepinfer-bin
[ -x "$bin/v4_decode" ] || { mkdir -p "$bin" && tar -xf .gpubin/bins.tar.xz -C "$bin"; } || exit 1
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1 || true)
[ -n "$NSYS" ] || { echo "nsys_decode: nsys not found"; exit 1; }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
rep=/tmp/nsys_decode_b$B
rm -f "$rep.nsys-rep" "$rep.sqlite"
timeout 240 "$NSYS" profile --capture-range=cudaProfilerApi --cuda-graph-trace=node --trace=cuda -o "$rep" \
  "$bin/v4_decode" --quick --layers "$LAYERS" --profile-step "$B" >"$OUT/nsys_b$B.log" 2>&1
echo "nsys profile rc=$?"
timeout 120 "$NSYS" stats --report cuda_gpu_trace --format csv --output "$OUT/nsys_b$B" "$rep.nsys-rep" \
  >>"$OUT/nsys_b$B.log" 2>&1
echo "nsys stats rc=$?"
csv=$(ls "$OUT"/nsys_b${B}*cuda_gpu_trace*.csv 2>/dev/null | head -1)
[ -n "$csv" ] || { echo "nsys_decode: no trace csv"; tail -20 "$OUT/nsys_b$B.log"; exit 1; }
python3 tools/gpu/timeline_table.py "$csv" --layers "$LAYERS" | tee "$OUT/nsys_b$B.txt"
# Every activity in start order (one layer's chain: kernel, duration, gap, stream) for reading, not printed.
python3 tools/gpu/timeline_table.py "$csv" --layers "$LAYERS" --top 0 --sequence 0:1000000 >"$OUT/nsys_b${B}_sequence.txt"
