#!/usr/bin/env bash
# Session 8, call 3 (two H200s): per-instruction stall samples (tools/gpu/ncu_sass_stalls.sh) of prefill v7 (GPU 0)
# and of batch-1 decode stream kernels (GPU 1); the CSV / text reports come back in $OUT/sass.tar.gz.
set -uo pipefail
real_out=${OUT:-$PWD/gpu-out}
bin=/tmp/deepinfer-bin res=/tmp/c3
mkdir -p "$bin" "$res" "$real_out" && tar -xf .gpubin/bins.tar.xz -C "$bin" || exit 1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} DEEPINFER_REQUIRE_GPU=1 OUT=$res
graph="--profile-from-start off --graph-profiling node"
CUDA_VISIBLE_DEVICES=0 bash tools/gpu/ncu_sass_stalls.sh prefill_v7 mxfp4_prefill_v7_kernel 0 -- \
  "$bin/roofline" --prefill-only --quick --out /tmp/r.json >"$res/prefill_v7.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 NCU_EXTRA="$graph" bash tools/gpu/ncu_sass_stalls.sh stream_a stream_gemm_kernel 0 -- \
  "$bin/v4_decode" --quick --layers 4 --profile-step 1 >"$res/stream_a.log" 2>&1
CUDA_VISIBLE_DEVICES=1 NCU_EXTRA="$graph" bash tools/gpu/ncu_sass_stalls.sh stream_c 'stream_gemm_kernel' 4 -- \
  "$bin/v4_decode" --quick --layers 4 --profile-step 1 >"$res/stream_c.log" 2>&1
wait
rm -f "$res"/*.ncu-rep
tar -czf "$real_out/sass.tar.gz" -C "$res" .
for f in prefill_v7 stream_a stream_c; do echo "== $f"; head -c 2500 "$res/ncu_sass_$f.txt"; echo; done
