#!/usr/bin/env bash
# Last device call of session 22 (binaries of 88b71d9 + the balanced persistent grid switch + stage_rows' later
# activation-scale passes loaded first; plus v4_decode_old = d7d5c5a): every one-GPU `gpu` suite
# (GpuFp8Gemm.StreamBalancedGridBitwise among them), then
#   - same-call A/B of the two builds (V4, V4.1) and the dense stream's phases with the new one;
#   - same-call A/B of DEEPINFER_STREAM_GRID=full|balanced (V4, V4.1; the `full` rows are the standing decode numbers);
#   - `roofline --fp8-phases` with the balanced grid (the full grid's rows: runs 128-129), and with
#     DEEPINFER_FP8_QUANT_PROLOGUE=0 (wo_b's rows pre-quantized: is its 4 us stage_rows the quantization or the loads?).
# A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session22_call3.sh
set -uo pipefail
export EXTRA_GPU0='ab_scales|OUT=$OUT/v4s bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_old v4_decode" 3;
ab_scales_v41|OUT=$OUT/v41s bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_old v4_decode" 3 --family v41;
fp8_phases|timeout 150 $b/roofline --fp8-phases --out $OUT/fp8_phases.json > $OUT/fp8_phases.log 2>&1 || true && grep -A1 phases $OUT/fp8_phases.log | cut -c1-420 | head -24;
ab_grid|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_GRID "full balanced" 3;
ab_grid_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_STREAM_GRID "full balanced" 3 --family v41;
fp8_phases_balanced|DEEPINFER_STREAM_GRID=balanced timeout 150 $b/roofline --fp8-phases --out $OUT/fp8_phases_bal.json > $OUT/fp8_phases_bal.log 2>&1 || true && grep -A1 phases $OUT/fp8_phases_bal.log | cut -c1-420 | head -24;
fp8_phases_noprologue|DEEPINFER_FP8_QUANT_PROLOGUE=0 timeout 150 $b/roofline --fp8-phases --out $OUT/fp8_phases_nopro.json > $OUT/fp8_phases_nopro.log 2>&1 || true && grep -A1 phases $OUT/fp8_phases_nopro.log | cut -c1-420 | head -24'
exec bash "$(dirname "$0")/../device_call.sh"
