#!/usr/bin/env bash
# Run HERE: downloads DeepSeek's kernel packages for the anchor benchmarks into .whl/ (ignored; name `.whl` in the
# device call's carry). PyPI ships them as sdists only (deepinfer-gemm 2.8.2 with its CUTLASS headers, 2.6 MB;
# deepinfer-flashmla 1.0.0, 34 MB), so they are built on the H200 (pip install --no-build-isolation) where torch
# and nvcc are; `pip download` cannot fetch them here because it would run their setup.py without a GPU toolchain,
# hence the JSON API.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl
grep -qxF "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >>.git/info/exclude
for pkg in deepinfer-gemm ${1:-}; do
  url=$(curl -s "https://pypi.org/pypi/$pkg/json" | python3 -c "import json,sys; print(json.load(sys.stdin)['urls'][0]['url'])")
  case "$url" in http*) ;; *) url="https://pypi.org/${url#../../}" ;; esac
  curl -sfL -o ".whl/$(basename "$url")" "$url"
  ls -la ".whl/$(basename "$url")"
done
# DeepGEMM's JIT includes <elfutils/libdwfl.h> (it dlopens libdw.so.1 at run time for backtraces, so only the
# headers are needed to build); the GPU machine has no libdw-dev, so its headers travel in .whl/include.
tmp=$(mktemp -d)
(cd "$tmp" && apt-get download libdw-dev libelf-dev >/dev/null 2>&1 && for f in *.deb; do dpkg-deb -x "$f" root; done)
mkdir -p .whl/include
cp -r "$tmp"/root/usr/include/. .whl/include/
rm -rf "$tmp"
ls .whl/include/elfutils/libdwfl.h
