#!/usr/bin/env bash
# Set-up (ci/setup.sh), then configure and build parbench and its tests into build/.
# Prints the python it used as its last line. BUILD_DIR and extra CMake arguments may be given:
#   BUILD_DIR=build-gpu ci/build.sh -DCMAKE_PREFIX_PATH=/opt/deps
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(bash ci/setup.sh | tail -n 1)
build_dir=${BUILD_DIR:-build}
torch_prefix=$("$python" -c "import torch; print(torch.utils.cmake_prefix_path)")
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$torch_prefix${EXTRA_PREFIX_PATH:+;$EXTRA_PREFIX_PATH}" \
  "-DPython3_EXECUTABLE=$python" "$@" >&2
cmake --build "$build_dir" -j "$(nproc)" >&2
echo "$python"
