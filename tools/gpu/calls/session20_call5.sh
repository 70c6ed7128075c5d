#!/usr/bin/env bash
# Last device call of session 20 (binaries of dd3d5c7 + docs, full pack): every `gpu` suite with the session's
# defaults (one block per SM for the branch GEMVs, the weight streams evict_first in L2), then:
#   - same-call A/B of DEEPINFER_WEIGHT_L2_EVICT_FIRST "0 1" (V4, V4.1; the `1` runs are the standing decode rows);
#   - the select's and the routing's in-step stamps with it off and on;
#   - one traced batch-1 V4 step at the defaults;
#   - the prefill rows (v9, v13 = what Auto now takes on wide groups, cuBLASLt FP8 in one run).
# ~480 s on one GPU. A step may not contain ';' (device_call.sh splits the list there).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session20_call5.sh
set -uo pipefail
export EXTRA_GPU0='ab_evict_first|OUT=$OUT/v4 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_WEIGHT_L2_EVICT_FIRST "0 1" 2;
ab_evict_first_v41|OUT=$OUT/v41 bash tools/gpu/decode_switch_ab.sh $b DEEPINFER_WEIGHT_L2_EVICT_FIRST "0 1" 2 --family v41;
stamps_tail|OUT=$OUT bash tools/gpu/stamps_ab.sh $b DEEPINFER_WEIGHT_L2_EVICT_FIRST "0 1";
trace_tail|OUT=$OUT/trace bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1 || true && head -14 $OUT/trace/trace_b1.txt;
prefill_tail|timeout 200 $b/roofline --prefill-only --prefill-16k --quick --out $OUT/prefill.json > $OUT/prefill.log 2>&1 || true && grep -E "^roofline|of the dense" $OUT/prefill.log | head -40'
exec bash "$(dirname "$0")/../device_call.sh"
