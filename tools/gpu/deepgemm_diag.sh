#!/usr/bin/env bash
# DeepGEMM (PyPI deepinfer-gemm 2.8.2) on the H200: stage-by-stage diagnosis of the anchor benchmark's segfault
# (bench/gpu/NOTES.md, "DeepGEMM anchor on sm90", says what each outcome means). Run on the GPU machine from the
# repo root with the sdist carried (device call: carry [".whl"]):
#
#     bash tools/gpu/deepgemm_diag.sh            # $OUT/deepgemm_diag.log, smoke*.json, deepgemm.json
#     bash tools/gpu/deepgemm_diag.sh --quick    # stops before the full anchor run (stage c)
#
# Stages, each in its own process (timeout, python3 -X faulthandler -u, C stdout unbuffered through stdbuf):
#   0  facts    GPU, nvcc, gcc, torch, libdw, debuggers on this machine
#   1  build    the sdist into /tmp/anchors, as run_prebuilt.sh builds it (skipped when already built there)
#   a  import   import deep_gemm, device and arch; then DeepGEMM's runtime and JIT runtime alone (no kernel)
#   p  probes   p1: the JIT runtime in the first version's conditions (no CUDA_HOME, nvcc perhaps off PATH: deep_jit
#               runs `which nvcc`, a C++ exception when it fails); p2: a deliberate deep_jit exception
#               (DG_JIT_DEBUG=bogus) twice, with the system libdw and with the stub. Does throwing itself crash?
#   b  smoke    b0: the first version's failing call (dense m=1 n=1024 k=4096) in its conditions (run_prebuilt.sh's
#               LD_LIBRARY_PATH, no CUDA_HOME, system libdw, no env fixes), verbose JIT; if it fails: the same with
#               one fix at a time (CUDA_HOME / libdw stub / LD_LIBRARY_PATH), a native backtrace (SIGSEGV handler
#               preloaded, gdb or cuda-gdb when present); b1: the script's defaults, m=n=k=4096 and the m=1 call
#   c  full     tools/gpu/deepgemm_anchor.py, parallel warm-up ($OUT/deepgemm.json)
# A summary is printed last. About 5-8 minutes from a bare machine (build 1-2 min; JIT compiles dominate).
set -u
cd "$(dirname "$0")/../.." || exit 1
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
OUT=${OUT:-/tmp/deepgemm_diag_out}
mkdir -p "$OUT"
LOG=$OUT/deepgemm_diag.log
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1
T0=$(date +%s)
stamp() { echo "[diag +$(($(date +%s) - T0))s] $*"; }
SUMMARY=()
note() {
  SUMMARY+=("$*")
  stamp "$*"
}
rc_word() {
  case "$1" in
    0) echo "ok" ;; 124) echo "TIMEOUT" ;; 139) echo "SEGFAULT (rc 139)" ;; 134) echo "ABORT (rc 134)" ;;
    *) echo "rc $1" ;;
  esac
}

ORIG_HOME=${HOME-<unset>}
ORIG_PATH=$PATH
ORIG_LD=${LD_LIBRARY_PATH:-}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$CUDA_HOME/bin:$PATH
export PYTHONPATH=/tmp/anchors${PYTHONPATH:+:$PYTHONPATH}
export DG_JIT_CACHE_DIR=${DG_JIT_CACHE_DIR:-/tmp/dg_jit_diag}
export HOME=${HOME:-/root}
mkdir -p "$DG_JIT_CACHE_DIR"
PY="python3 -X faulthandler -u"
UNBUF=""
command -v stdbuf >/dev/null && UNBUF="stdbuf -o0 -e0"
TOOLS=/tmp/dg_diag_tools
mkdir -p "$TOOLS"
GDB=$(command -v gdb || command -v cuda-gdb || true)
PYBIN=$(python3 -c 'import sys; print(sys.executable)') # the interpreter itself (gdb cannot run a wrapper script)

# ---------------------------------------------------------------------------------------------------------- 0
stamp "stage 0: facts"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | head -2
echo "nvcc on the original PATH: $(PATH=$ORIG_PATH command -v nvcc || echo none); CUDA_HOME=$CUDA_HOME;" \
  "$(nvcc --version 2>&1 | grep release)"
echo "gcc: $(gcc --version 2>&1 | head -1); cc: $(command -v cc || echo none); which: $(command -v which || echo none);" \
  "stdbuf: ${UNBUF:-none}; debugger: ${GDB:-none}"
echo "HOME=$ORIG_HOME LD_LIBRARY_PATH=${ORIG_LD:-<unset>} DG_/DJ_ variables: $(env | grep -E '^(DG|DJ)_' | tr '\n' ' ')"
python3 -c "
import sys, torch
print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda,
      torch.cuda.get_device_name(), torch.cuda.get_device_capability())" 2>&1 | tail -1
echo "libdw/libelf known to ld.so: $(ldconfig -p | grep -E 'libdw\.so|libelf\.so' | awk '{print $NF}' | tr '\n' ' ')"

# ---------------------------------------------------------------------------------------------------------- 1
if ls /tmp/anchors/deep_gemm/_C*.so >/dev/null 2>&1; then
  stamp "stage 1: /tmp/anchors already holds a build, not rebuilt"
else
  stamp "stage 1: building the sdist into /tmp/anchors"
  # As session 4 built it (no -Wl,-Bsymbolic), to reproduce the crash; the fix: tools/gpu/deepgemm_bind_local.sh.
  CPATH=$PWD/.whl/include${CPATH:+:$CPATH} timeout 400 python3 -m pip install -q --no-index --no-deps \
    --no-build-isolation --target /tmp/anchors .whl/deepinfer_gemm-*.tar.gz >"$TOOLS/build.log" 2>&1
  rc=$?
  tail -5 "$TOOLS/build.log"
  note "1 build: $(rc_word $rc)"
  if [ $rc != 0 ]; then
    printf '  %s\n' "SUMMARY" "${SUMMARY[@]}"
    exit 1
  fi
fi
echo "installed include dirs: $(ls /tmp/anchors/deep_gemm/include | tr '\n' ' '); $(ls /tmp/anchors/deep_gemm/_C*.so)"

# ---------------------------------------------------------------------------------------------------------- a
stamp "stage a1: import + device"
timeout 120 $UNBUF $PY -c "
import os, torch, deep_gemm
print('deep_gemm', deep_gemm.__version__, os.path.dirname(deep_gemm.__file__))
print('device', torch.cuda.get_device_name(), 'sm_%d%d' % torch.cuda.get_device_capability(),
      'SMs', torch.cuda.get_device_properties(0).multi_processor_count)
"
note "a1 import: $(rc_word $?)"
stamp "stage a2: DeepGEMM runtime (cuBLASLt handle) and JIT runtime (nvcc found and run, cache dir), no kernel"
timeout 120 $UNBUF $PY -c "
import deep_gemm
print('deep_gemm.get_num_sms() =', deep_gemm.get_num_sms())
deep_gemm._C.get_jit()
print('JIT runtime up')
"
note "a2 runtime + JIT runtime, fixed env: $(rc_word $?)"

# ---------------------------------------------------------------------------------------------------------- p
# The first version's conditions (tools/gpu/run_prebuilt.sh): the toolkit's libraries first in LD_LIBRARY_PATH,
# no CUDA_HOME, the original PATH without the toolkit's bin (as run_prebuilt.sh leaves it), default JIT cache.
RAW_PATH=$(echo "$ORIG_PATH" | tr ':' '\n' | grep -v -E '^/usr/local/cuda[^/]*/bin/?$' | paste -sd:)
RAW_ENV=(env -u CUDA_HOME -u CUDA_PATH -u DG_JIT_CACHE_DIR "PATH=$RAW_PATH"
  "LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${ORIG_LD:+:$ORIG_LD}")
[ "$ORIG_HOME" = "<unset>" ] && RAW_ENV=(env -u HOME "${RAW_ENV[@]:1}")
echo "raw conditions: nvcc on their PATH: $(PATH=$RAW_PATH command -v nvcc || echo none)"
PROBE='
import sys
sys.path.insert(0, "tools/gpu")
import deepgemm_anchor as A
if sys.argv[1] == "stub":
    print("libdw:", A.shadow_libdw("/tmp/dg_diag_tools/libdw_stub"))
import deep_gemm
for attempt in (1, 2):
    try:
        deep_gemm._C.get_jit()
        print("attempt", attempt, "JIT runtime constructed (no exception reached Python)")
    except RuntimeError as e:
        print("attempt", attempt, "raised RuntimeError OK:", str(e).splitlines()[0][:200])
print("libdw mapped:", A.loaded_libdw())
'
stamp "stage p1: JIT runtime in the raw conditions (the which-nvcc path), system libdw"
"${RAW_ENV[@]}" timeout 120 $UNBUF $PY -c "$PROBE" system
note "p1 JIT runtime, raw env, system libdw: $(rc_word $?)"
for mode in system stub; do
  stamp "stage p2: a deliberate deep_jit exception (DG_JIT_DEBUG=bogus), twice, libdw $mode"
  DG_JIT_DEBUG=bogus timeout 120 $UNBUF $PY -c "$PROBE" $mode
  note "p2 deliberate exception, libdw $mode: $(rc_word $?)"
done

# ---------------------------------------------------------------------------------------------------------- b
VERBOSE=(DG_JIT_PRINT_COMPILER_COMMAND=1 DG_PRINT_CONFIGS=1 DG_JIT_PRINT_LOAD_TIME=1)
FIRST=1,1024,4096 # the first version's first call: dense m=1 n=1024 k=4096 (v4 wq_a)
smoke() {         # smoke LABEL OUTFILE ENV-COMMAND... -- ANCHOR-ARGS...
  local label=$1 out=$2 envs=() args=() rc
  shift 2
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    envs+=("$1")
    shift
  done
  shift
  args=("$@")
  stamp "stage $label"
  "${envs[@]}" "${VERBOSE[@]}" timeout 180 $UNBUF $PY tools/gpu/deepgemm_anchor.py "${args[@]}" --out "$out"
  rc=$?
  note "$label: $(rc_word $rc)"
  if [ "$out" != /dev/null ] && [ -f "$out" ]; then
    python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
for x in r['rows']:
    print('  ->', x['error'].splitlines()[0][:300] if 'error' in x else
          'us=%.2f rel_l2=%.1e first call %.1f s' % (x['us'], x['rel_l2_vs_dequantized_matmul'], x['first_call_s']))
if not r['rows']:
    print('  ->', r.get('error', 'no rows')[:300])
" "$out" 2>&1 | tail -3
  fi
  return $rc
}
smoke "b0 raw conditions, m=1 n=1024 k=4096" "$OUT/smoke_raw.json" "${RAW_ENV[@]}" -- --raw --smoke $FIRST
B0=$?
RAW_CACHE=${ORIG_HOME/<unset>/}/.dj
stamp "JIT cache of b0 ($RAW_CACHE); uncommitted build dirs are left only by a process that died mid-compile:"
find "$RAW_CACHE" -maxdepth 2 2>/dev/null | sort | head -20
for d in "$RAW_CACHE"/tmp/*/; do
  [ -d "$d" ] && echo "uncommitted $d: $(ls "$d" | tr '\n' ' ')"
done
if [ $B0 != 0 ]; then
  smoke "b0 + CUDA_HOME (no which-nvcc exception)" /dev/null "${RAW_ENV[@]}" "CUDA_HOME=$CUDA_HOME" -- \
    --raw --smoke $FIRST
  smoke "b0 + libdw stub" /dev/null "${RAW_ENV[@]}" -- --no-env-fix --keep-ld-library-path --libdw stub --smoke $FIRST
  smoke "b0 without the toolkit in LD_LIBRARY_PATH" /dev/null "${RAW_ENV[@]}" -- --no-env-fix --libdw system \
    --smoke $FIRST

  stamp "stage b0-bt: native backtrace of b0 (SIGSEGV handler preloaded, no faulthandler)"
  cat >"$TOOLS/segv_bt.c" <<'CEOF'
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void on_fault(int sig, siginfo_t *si, void *ctx) {
  (void)ctx;
  char buf[160];
  int n = snprintf(buf, sizeof buf, "\n[segv_bt] signal %d, fault address %p; native backtrace:\n", sig,
                   si ? si->si_addr : NULL);
  write(2, buf, n);
  void *frames[64];
  int k = backtrace(frames, 64);
  backtrace_symbols_fd(frames, k, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}
__attribute__((constructor)) static void install(void) {
  void *f[1];
  backtrace(f, 1); /* load the unwinder now, not inside the handler */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  sigaction(SIGILL, &sa, NULL);
  sigaction(SIGFPE, &sa, NULL);
}
CEOF
  if gcc -shared -fPIC -o "$TOOLS/segv_bt.so" "$TOOLS/segv_bt.c" 2>&1; then
    "${RAW_ENV[@]}" LD_PRELOAD=$TOOLS/segv_bt.so timeout 180 $UNBUF python3 -u tools/gpu/deepgemm_anchor.py \
      --raw --smoke $FIRST --out /dev/null >"$TOOLS/segv_bt.log" 2>&1
    note "b0-bt: $(rc_word $?)"
    if command -v c++filt >/dev/null; then tail -60 "$TOOLS/segv_bt.log" | c++filt; else tail -60 "$TOOLS/segv_bt.log"; fi
    # Frames inside DeepGEMM's own library (lib(+0xoffset) form) through addr2line.
    grep -oE '/[^ (]*/_C[^ (]*\.so\(\+0x[0-9a-f]+\)' "$TOOLS/segv_bt.log" | head -20 | while IFS='(' read -r lib off; do
      off=${off#+}
      off=${off%)}
      echo "  _C.so $off -> $(addr2line -C -f -e "$lib" "$off" 2>/dev/null | head -1)"
    done
  fi
  if [ -n "$GDB" ]; then
    stamp "stage b0-gdb: $GDB backtrace"
    "${RAW_ENV[@]}" timeout 150 "$GDB" -batch -ex "set pagination off" -ex run -ex "bt 40" \
      --args "$PYBIN" -u tools/gpu/deepgemm_anchor.py --raw --smoke $FIRST --out /dev/null 2>&1 | tail -60
  fi
fi

smoke "b1 the script's defaults, m=n=k=4096" "$OUT/smoke.json" env -- --smoke
smoke "b1 the script's defaults, m=1 n=1024 k=4096" "$OUT/smoke_m1.json" env -- --smoke $FIRST
stamp "JIT cache ($DG_JIT_CACHE_DIR):"
find "$DG_JIT_CACHE_DIR" -maxdepth 2 -not -path '*/libdw_stub*' | sort | head -30
d=$(ls -d "$DG_JIT_CACHE_DIR"/cache/*/ 2>/dev/null | head -1)
if [ -n "$d" ] && [ -f "$d/meta.json" ]; then
  echo "meta.json of $d:"
  head -c 2000 "$d/meta.json"
  echo
fi

# ---------------------------------------------------------------------------------------------------------- c
if [ $QUICK = 0 ]; then
  left=$((560 - ($(date +%s) - T0)))
  if [ $left -gt 90 ]; then
    stamp "stage c: full anchor (parallel warm-up), $left s left"
    timeout $left $UNBUF $PY tools/gpu/deepgemm_anchor.py --out "$OUT/deepgemm.json" \
      --warm-budget-s $((left / 2)) --budget-s $((left - 45))
    note "c full anchor: $(rc_word $?)"
    [ -f "$OUT/deepgemm.json" ] && python3 - "$OUT/deepgemm.json" <<'PYEOF' 2>&1 | tail -40
import json, sys
r = json.load(open(sys.argv[1]))
ok = [x for x in r["rows"] if "error" not in x]
print(f"deepgemm.json: {len(ok)} rows measured, {len(r['rows']) - len(ok)} failed, "
      f"warm-up {r.get('warm', {}).get('seconds')} s, not run: {len(r.get('not_run', []))}")
for x in r["rows"]:
    print(" ", x["kind"], x["shape"], {k: x[k] for k in ("m", "groups", "rows_per_group", "tokens") if k in x},
          ("%.2f us" % x["us"]) if "us" in x else x["error"].splitlines()[0][:160])
PYEOF
  else
    note "c full anchor: not run ($left s left)"
  fi
fi

echo
echo "SUMMARY (bench/gpu/NOTES.md, 'DeepGEMM anchor on sm90', reads these)"
printf '  %s\n' "${SUMMARY[@]}"
stamp "done"
