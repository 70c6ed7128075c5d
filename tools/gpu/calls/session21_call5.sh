#!/usr/bin/env bash
# Last device call of session 21 (binaries of ad97270: the MXFP4 stream's 34 KB stages, every other default of
# session 20; plus v4_decode_old = the same tree with 17 KB stages): every one-GPU `gpu` suite, then
#   - same-call A/B of the two builds (V4, V4.1; the `v4_decode` rows are the standing decode numbers);
#   - the prefill rows (v9, v13, cuBLASLt FP8 in one run);
#   - one traced batch-1 V4 step.
# ~480 s on one GPU. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session21_call5.sh
set -uo pipefail
export EXTRA_GPU0='ab_stage|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_old v4_decode" 2;
ab_stage_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b BIN "v4_decode_old v4_decode" 2 --family v41;
prefill_tail|timeout 200 $b/roofline --prefill-only --prefill-16k --quick --out $OUT/prefill.json > $OUT/prefill.log 2>&1 || true && grep -E "^roofline|of the dense" $OUT/prefill.log | head -40;
trace_tail|OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true && head -14 $OUT/trace/trace_b1.txt'
exec bash "$(dirname "$0")/../device_call.sh"
