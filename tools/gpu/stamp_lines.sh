#!/usr/bin/env bash
# Runs a command with line-buffered output and prefixes every line (stdout and stderr together) with the wall time
# as epoch seconds (bash's EPOCHREALTIME, microseconds), so a benchmark's rows can be lined up with a clock / power
# log taken beside it (tools/gpu/clock_log.sh). The command's exit status is kept.
#   usage: tools/gpu/stamp_lines.sh COMMAND [ARGS...] > LOG
set -o pipefail
stdbuf -oL -eL "$@" 2>&1 | while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done
