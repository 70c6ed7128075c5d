#!/usr/bin/env bash
# Logs the GPU's SM / memory clocks, power, temperature and the active clock-event (throttle) reasons every 200 ms
# into DIR/clocks.csv and DIR/clock_reasons.csv until stopped (two nvidia-smi loggers: an unknown field name in the
# second, on an older driver, must not lose the first). Why: a prefill row's time depends on its place in the run
# (NOTES "Session 55"); the log says whether the SM clock or power limit moved under it.
#   usage: tools/gpu/clock_log.sh start DIR   (prints nothing; the loggers run in the background)
#          tools/gpu/clock_log.sh stop DIR
set -uo pipefail
cmd=${1:?start or stop} dir=${2:?DIR}
case $cmd in
  start)
    mkdir -p "$dir"
    nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
      --format=csv -lms 200 >"$dir/clocks.csv" 2>&1 &
    echo $! >"$dir/.clock_log.pids"
    nvidia-smi --query-gpu=timestamp,index,clocks_event_reasons.active --format=csv -lms 200 \
      >"$dir/clock_reasons.csv" 2>&1 &
    echo $! >>"$dir/.clock_log.pids"
    ;;
  stop)
    [ -f "$dir/.clock_log.pids" ] && kill $(cat "$dir/.clock_log.pids") 2>/dev/null
    rm -f "$dir/.clock_log.pids"
    ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
