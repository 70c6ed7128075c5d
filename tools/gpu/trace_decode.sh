#!/usr/bin/env bash
# One batch-B decode step's real timeline without Nsight Systems (the GPU machine has none, session 11): the CUPTI
# injection library tools/gpu/kernel_trace records every node of the step's CUDA graph as it runs (PDL overlap and
# idle gaps included), then tools/gpu/timeline_table.py prints per kernel name: launches, summed busy time, and the
# step's span, busy union and idle gaps; the whole sequence in start order goes to a file.
#   usage (GPU machine, repo root, prebuilt binaries in $b or .gpubin): bash tools/gpu/trace_decode.sh [BATCH (1)]
#          [LAYERS (16)] [extra v4_decode args, e.g. --family v41]
#   output: $OUT/trace_b<B>.csv, $OUT/trace_b<B>.txt (the table), $OUT/trace_b<B>_sequence.txt
#   libcupti: the CUDA toolkit's, else .gpubin's libcupti.so.13 (carried from this machine's toolkit).
set -uo pipefail
B=${1:-1}
LAYERS=${2:-16}
shift 2 2>/dev/null || shift $#
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
bin=${b:-/tmp/deepinfer-bin}
[ -x "$bin/v4_decode" ] || { mkdir -p "$bin" && tar -xf .gpubin/bins.tar.xz -C "$bin"; } || exit 1
cupti_dir=$(dirname "$(ls /usr/local/cuda/lib64/libcupti.so* /usr/local/cuda/extras/CUPTI/lib64/libcupti.so* \
  /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so* "$bin"/libcupti.so* 2>/dev/null | head -1)" 2>/dev/null)
[ -n "$cupti_dir" ] || { echo "trace_decode: no libcupti"; exit 1; }
lib=/tmp/libkernel_trace.so
cupti_so=$(ls "$cupti_dir"/libcupti.so* | head -1)
g++ -O2 -shared -fPIC -I/usr/local/cuda/include -I/usr/local/cuda/extras/CUPTI/include \
  tools/gpu/kernel_trace/kernel_trace.cpp -o "$lib" "$cupti_so" -Wl,-rpath,"$cupti_dir" || exit 1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$cupti_dir:${LD_LIBRARY_PATH:-}
csv=$OUT/trace_b$B.csv
CUDA_INJECTION64_PATH=$lib KERNEL_TRACE_CSV=$csv timeout 240 "$bin/v4_decode" --quick --layers "$LAYERS" \
  --profile-step "$B" "$@" >"$OUT/trace_b$B.log" 2>&1
echo "v4_decode rc=$? ($(tail -1 "$OUT/trace_b$B.log"))"
[ -s "$csv" ] || { echo "trace_decode: no trace"; tail -20 "$OUT/trace_b$B.log"; exit 1; }
python3 tools/gpu/timeline_table.py "$csv" --layers "$LAYERS" | tee "$OUT/trace_b$B.txt"
python3 tools/gpu/timeline_table.py "$csv" --layers "$LAYERS" --top 0 --sequence 0:1000000 >"$OUT/trace_b${B}_sequence.txt"
