#!/usr/bin/env bash
# Runs one command once per value of an environment switch, in turn, each under a header line "VAR=value", its
# output filtered by an extended regex (empty: everything). In the command's arguments {v} becomes the value and {i}
# the run's index, so each run can write its own JSON. device_call.sh splits its step list at ';', so a loop over a
# switch inside a step needs this script.
#   usage: tools/gpu/switch_sweep.sh VAR "v1 v2 ..." REGEX [--timeout S] -- command args...
#   e.g.   tools/gpu/switch_sweep.sh DEEPINFER_FP8_QUANT_PROLOGUE "0 1 0 1" 'batch=1 ' --timeout 120 -- \
#            $b/v4_decode --quick --pdl on --out $OUT/decode_{v}_{i}.json
set -uo pipefail
[ $# -ge 4 ] || { sed -n '2,8p' "$0" >&2; exit 2; }
var=$1 values=$2 regex=$3; shift 3
limit=0
if [ "$1" = --timeout ]; then limit=$2; shift 2; fi
[ "$1" = -- ] || { echo "switch_sweep: expected -- before the command" >&2; exit 2; }
shift
i=0 worst=0
for v in $values; do
  echo "$var=$v"
  args=()
  for a in "$@"; do a=${a//\{v\}/$v}; args+=("${a//\{i\}/$i}"); done
  if [ "$limit" -gt 0 ]; then env "$var=$v" timeout "$limit" "${args[@]}" >/tmp/switch_sweep.$$ 2>&1
  else env "$var=$v" "${args[@]}" >/tmp/switch_sweep.$$ 2>&1; fi
  rc=$?
  if [ -n "$regex" ]; then grep -E "$regex" /tmp/switch_sweep.$$; else cat /tmp/switch_sweep.$$; fi
  # A failed run shows its last lines unfiltered (a usage message or an error would not match the filter).
  [ $rc -ne 0 ] && { echo "  rc=$rc; its last lines:"; tail -n 5 /tmp/switch_sweep.$$; worst=$rc; }
  i=$((i + 1))
done
rm -f /tmp/switch_sweep.$$
exit $worst
