#!/usr/bin/env bash
# The decode select's and the MoE routing's phase stamps inside the batch-1 V4 step (v4_decode --select-stamps /
# --route-stamps) once per value of an environment switch, then the median rows side by side.
#   usage (GPU machine): OUT=... bash tools/gpu/stamps_ab.sh BIN_DIR VAR "VALUE ..."
set -uo pipefail
bin=$1 var=$2 values=$3
out=${OUT:-$PWD/gpu-out}/stamps_$var
mkdir -p "$out"
for v in $values; do
  env "$var=$v" timeout 100 "$bin/v4_decode" --quick --pdl on --select-stamps --out "$out/sel_$v.json" >"$out/sel_$v.log" 2>&1 ||
    echo "select stamps $var=$v failed (rc $?)"
  env "$var=$v" timeout 100 "$bin/v4_decode" --quick --pdl on --route-stamps --out "$out/route_$v.json" \
    >"$out/route_$v.log" 2>&1 || echo "route stamps $var=$v failed (rc $?)"
done
for v in $values; do
  echo "-- $var=$v"
  grep -h "all layers" "$out/sel_$v.log"
  grep -h -E "layer +hash|^ +all " "$out/route_$v.log"
done
