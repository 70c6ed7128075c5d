#!/usr/bin/env bash
# DeepGEMM (PyPI deepinfer-gemm 2.8.2) on the H200, second diagnosis (after tools/gpu/deepgemm_diag.sh, session 5):
# its JIT runtime segfaults inside std::regex (deep_jit::CUDA::get_compiler_info compiling "release (\d+)\.(\d+)";
# gdb: std::__detail::_Compiler ... collate<char>::transform jumping to a bogus address). Hypothesis: _C.so's
# implicitly instantiated libstdc++ templates (weak, exported) are bound by the dynamic linker to another loaded
# library's copies (torch's, built with another compiler) whose layout differs. Test: (1) list which loaded
# libraries export the regex compiler's instantiations, (2) rebuild the sdist with those instantiations kept
# local (-fvisibility-inlines-hidden, -Wl,-Bsymbolic), (3) re-run the failing call and, if it passes, the anchor.
# Outcome (run 27): libc10 / libtorch_* export 34 such symbols each; rebuilt with these flags the JIT runtime comes
# up and the anchor measures all 23 shapes. -Wl,-Bsymbolic alone still crashed (run 30), so the hidden inline
# instantiations are the part that matters; run_prebuilt.sh's anchor build uses the same three flags (run 31).
#
#   device call, carry [".whl"]:  bash tools/gpu/deepgemm_bind_local.sh [SECONDS]   ($OUT/deepgemm_bind_local.log,
#                                 $OUT/deepgemm.json when the anchor runs; SECONDS bounds the anchor, default 240)
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/deepgemm_bind_local_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/deepgemm_bind_local.log") 2>&1
BUDGET=${1:-240}
T0=$(date +%s)
stamp() { echo "[bind-local +$(($(date +%s) - T0))s] $*"; }
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PATH=${CUDA_HOME:-/usr/local/cuda}/bin:$PATH HOME=${HOME:-/root}
export DG_JIT_CACHE_DIR=/tmp/dg_jit_bl
mkdir -p "$DG_JIT_CACHE_DIR"
TARGET=/tmp/anchors_bl

stamp "1: who exports std::regex's compiler instantiations (the symbol _C.so calls)"
TORCH_LIB=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
for f in "$TORCH_LIB"/*.so* /tmp/anchors/deep_gemm/_C*.so; do
  [ -f "$f" ] || continue
  n=$(nm -D --defined-only "$f" 2>/dev/null | grep -c '_ZNSt8__detail9_CompilerINSt7__cxx1112regex_traitsIcEEE')
  [ "$n" != 0 ] && echo "  $(basename "$f"): $n regex _Compiler symbols exported"
done
python3 -c 'import torch; print(open("/proc/self/maps").read())' | grep -oE '/[^ ]*libstdc\+\+[^ ]*' | sort -u |
  sed 's/^/  libstdc++ mapped with torch: /'

stamp "2: rebuild with local template instantiations"
rm -rf "$TARGET"
CPATH=$PWD/.whl/include${CPATH:+:$CPATH} CFLAGS="-fvisibility-inlines-hidden" \
  LDFLAGS="-Wl,-Bsymbolic -Wl,--exclude-libs,ALL" timeout 400 python3 -m pip install -q --no-index --no-deps \
  --no-build-isolation --target "$TARGET" .whl/deepinfer_gemm-*.tar.gz >/tmp/dg_bl_build.log 2>&1
rc=$?
tail -3 /tmp/dg_bl_build.log
stamp "build rc=$rc"
[ $rc = 0 ] || exit 1
n=$(nm -D --defined-only "$TARGET"/deep_gemm/_C*.so | grep -c '_ZNSt8__detail9_CompilerINSt7__cxx1112regex_traitsIcEEE')
echo "  rebuilt _C.so exports $n regex _Compiler symbols (the exported ones are not the calls that crashed)"

stamp "3: the failing call (JIT runtime: nvcc --version parsed by std::regex)"
PYTHONPATH=$TARGET timeout 120 python3 -X faulthandler -u -c "
import deep_gemm
print('deep_gemm.get_num_sms() =', deep_gemm.get_num_sms())
deep_gemm._C.get_jit()
print('JIT runtime up')
"
rc=$?
stamp "JIT runtime rc=$rc"
[ $rc = 0 ] || exit 1

left=$((BUDGET - ($(date +%s) - T0)))
[ $left -gt 60 ] || { stamp "no time left for the anchor"; exit 0; }
stamp "4: the anchor (tools/gpu/deepgemm_anchor.py), $left s"
PYTHONPATH=$TARGET timeout $left python3 -X faulthandler -u tools/gpu/deepgemm_anchor.py --out "$OUT/deepgemm.json" \
  --warm-budget-s $((left / 2)) --budget-s $((left - 30))
stamp "anchor rc=$?"
