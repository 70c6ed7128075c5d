# Sourced by the Nsight Compute scripts of this folder (ncu_prefill.sh, ncu_prefill_traffic.sh, ncu_decode_kernels.sh,
# profile_decode.sh, ncu_sass_stalls.sh): `ncu_setup NAME [BINARY]` makes $OUT (default ./gpu-out), unpacks
# .gpubin/bins.tar.xz into $bin (/tmp/deepinfer-bin) unless BINARY is already there, finds ncu as $NCU and puts the
# CUDA libraries on LD_LIBRARY_PATH. Returns 1, with NAME in the message, when the binaries or ncu are missing.
ncu_setup() {
  OUT=${OUT:-$PWD/gpu-out}
  mkdir -p "$OUT"
  bin=/tmp/deepinfer-bin
  if [ -n "${2:-}" ] && [ ! -x "$bin/$2" ]; then
    mkdir -p "$bin" && tar -xf .gpubin/bins.tar.xz -C "$bin" || { echo "$1: no packed binaries"; return 1; }
  fi
  NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
  [ -n "$NCU" ] || { echo "$1: ncu not found"; return 1; }
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
}
