#!/usr/bin/env bash
# Session 65: the index selects' phase stamps in the step at ef96c19d (`v4_decode --select-stamps`, batch 1, V4 and
# V4.1): where the CSA layers' ~15.5 us select on V4's chain (run 291's trace; ~6-7 us alone) spends its time beside
# the query branch's wq_b (run 295: not SM room). Last run in session 34-35 on an H200.
#   pack (here): session65_call5.sh's (v4_decode at ef96c19d's engine).
#   usage (GPU machine, repo root): bash tools/gpu/calls/session65_call8.sh   (~30 s)
set -uo pipefail
export SKIP_SUITES=1
source "$(dirname "$0")/steps.sh"
export EXTRA_GPU0="select_stamps_v4|timeout 150 \$b/v4_decode --quick --pdl on --select-stamps --out \$OUT/select_stamps_v4.json > \$OUT/select_stamps_v4.log 2>&1 || true;
select_stamps_v41|timeout 150 \$b/v4_decode --quick --pdl on --family v41 --select-stamps --out \$OUT/select_stamps_v41.json > \$OUT/select_stamps_v41.log 2>&1 || true"
clock_logged
