#!/usr/bin/env bash
# Installs what deepinfer needs to build and test, skipping what is already there.
# Debian packages for the build, PyPI packages for the independent references used by tests.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

apt_packages=(cmake ninja-build g++ pkg-config libgtest-dev nlohmann-json3-dev libcli11-dev python3 python3-dev pybind11-dev)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[deps] installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# PyPI packages: reference implementations the tests compare against (never used by the engine).
req="$here/requirements-test.txt"
stamp_dir="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/deepinfer"
stamp="$stamp_dir/pip-$(sha256sum "$req" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "[deps] installing PyPI packages from tools/requirements-test.txt"
  python3 -m pip install -q --disable-pip-version-check -r "$req"
  mkdir -p "$stamp_dir" && touch "$stamp"
fi
# NCCL headers and libnccl.so.2 for the multi-GPU communicator, built with the CUDA backend only (cmake/nccl.cmake
# finds them in site-packages).
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  python3 -c "import nvidia.nccl" 2>/dev/null || python3 -m pip install -q --disable-pip-version-check nvidia-nccl-cu13
fi
