#!/usr/bin/env bash
# Run HERE (the development machine), not on the GPU machine: the GPU machine cannot reach a package registry,
# so the build dependencies the top-level CMakeLists.txt asks for (nlohmann_json, CLI11, GoogleTest) travel with
# the working tree as an ignored folder, build-gpu-deps/ (name it in the device call's `carry`).
#   build-gpu-deps/prefix/      relocatable CMake packages: nlohmann_json and CLI11 (header-only)
#   build-gpu-deps/googletest/  GoogleTest sources; check.sh builds and installs them into prefix/ there
set -euo pipefail
cd "$(dirname "$0")/../.."
dst=build-gpu-deps
rm -rf "$dst"
mkdir -p "$dst/prefix/include" "$dst/prefix/share/cmake"
cp -r /usr/include/nlohmann "$dst/prefix/include/"
cp -r /usr/share/cmake/nlohmann_json "$dst/prefix/share/cmake/"
cp -r /usr/include/CLI "$dst/prefix/include/"
cp -r /usr/share/cmake/CLI11 "$dst/prefix/share/cmake/"
cp -r /usr/src/googletest "$dst/googletest"
du -sh "$dst"
