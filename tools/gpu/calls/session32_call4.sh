#!/usr/bin/env bash
# Session 32, fourth call: the routed MXFP4 stream's consumer loop under ncu (issue 4: what bounds the ~1 us per 34 KB
# stage of fp4_wgmma_kernel's consumers at batch 1), main's code (84faa5c). V4-Flash, 4 layers (3 are hash layers: at least 4), one graph step at 4K
# (`v4_decode --profile-step 1`, each kernel node profiled on its own): the w1|w3 launch (skip 0) and w2 (skip 1),
# per-instruction stall samples (tools/gpu/ncu_sass_stalls.sh) and the warp-state / scheduler sections.
#   usage (GPU machine, repo root): bash tools/gpu/calls/session32_call4.sh
set -uo pipefail
export SKIP_SUITES=1
export EXTRA_GPU0="ncu_w13|NCU_EXTRA='--profile-from-start off --graph-profiling node' OUT=\$OUT timeout 280 bash tools/gpu/ncu_sass_stalls.sh fp4_w13 fp4_wgmma_kernel 0 -- \$b/v4_decode --quick --layers 4 --profile-step 1 > \$OUT/ncu_w13.txt 2>&1 || true && ncu -i \$OUT/ncu_sass_fp4_w13.ncu-rep --page details --print-units base > \$OUT/ncu_w13_details.txt 2>&1 || true && grep -E 'Duration|Stall|Eligible|Issued Warp|Issue Slots|No Eligible|Registers Per|DRAM Throughput|Warp Cycles Per' \$OUT/ncu_w13_details.txt | head -40;
ncu_w2|NCU_EXTRA='--profile-from-start off --graph-profiling node' OUT=\$OUT timeout 280 bash tools/gpu/ncu_sass_stalls.sh fp4_w2 fp4_wgmma_kernel 1 -- \$b/v4_decode --quick --layers 4 --profile-step 1 > \$OUT/ncu_w2.txt 2>&1 || true && ncu -i \$OUT/ncu_sass_fp4_w2.ncu-rep --page details --print-units base > \$OUT/ncu_w2_details.txt 2>&1 || true && grep -E 'Duration|Eligible|Issued Warp|No Eligible|Warp Cycles Per|DRAM Throughput' \$OUT/ncu_w2_details.txt | head -20"
exec bash "$(dirname "$0")/../device_call.sh"
