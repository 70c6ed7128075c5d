#!/usr/bin/env bash
# Logs the GPU's SM / memory clocks, power, temperature and utilization (DIR/NAME.csv) and the active clock-event
# (throttle) reasons (DIR/NAME_reasons.csv) every CLOCK_LOG_MS milliseconds (default 200) until stopped: two
# nvidia-smi loggers, so that a field name an older driver lacks cannot lose the first. CSV without header or units;
# columns: timestamp, clocks.sm, clocks.mem, power.draw, temperature.gpu, utilization.gpu (one line per GPU and
# sample) and timestamp, index, clocks_event_reasons.active. Why: a prefill row's time depends on its place in the run
# (bench/gpu/NOTES.md "Session 55" / "Session 56": the board at its power cap); clock_watch.sh uses it around one
# command, the call scripts around a whole call.
#   usage: tools/gpu/clock_log.sh start DIR [NAME (clocks)]   (the loggers run in the background)
#          tools/gpu/clock_log.sh stop DIR [NAME]
set -uo pipefail
cmd=${1:?start or stop} dir=${2:?DIR} name=${3:-clocks}
pids=$dir/.$name.pids
case $cmd in
  start)
    mkdir -p "$dir"
    ms=${CLOCK_LOG_MS:-200}
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
      --format=csv,noheader,nounits -lms "$ms" >"$dir/$name.csv" 2>"$dir/$name.smi_err" &
    echo $! >"$pids"
    nvidia-smi --query-gpu=timestamp,index,clocks_event_reasons.active --format=csv,noheader -lms "$ms" \
      >"$dir/${name}_reasons.csv" 2>&1 &
    echo $! >>"$pids"
    ;;
  stop)
    if [ -f "$pids" ]; then
      kill $(cat "$pids") 2>/dev/null
      rm -f "$pids"
    fi
    [ -s "$dir/$name.smi_err" ] || rm -f "$dir/$name.smi_err"
    ;;
  *) echo "usage: $0 start|stop DIR [NAME]" >&2; exit 2 ;;
esac
