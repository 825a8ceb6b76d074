#!/usr/bin/env bash
# Set-up (ci/setup.sh), then configure and build parbench and its tests into build/.
# Prints the python it used as its last line. BUILD_DIR, BUILD_LOG (default BUILD_DIR/build.log)
# and extra CMake arguments may be given:
#   BUILD_DIR=build-gpu ci/build.sh -DCMAKE_PREFIX_PATH=/opt/deps
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(bash ci/setup.sh | tail -n 1)
build_dir=${BUILD_DIR:-build}
torch_prefix=$("$python" -c "import torch; print(torch.utils.cmake_prefix_path)")
# The Release Google Benchmark that ci/setup.sh built; named outright, since a build folder
# configured before it existed has Debian's cached.
benchmark_prefix=${PARBENCH_BENCHMARK_PREFIX:-$PWD/.deps/benchmark-release}
# CMake's and LibTorch's configure messages (a hundred lines, on every run) go to the log, which
# is shown only when the build fails.
log=${BUILD_LOG:-$build_dir/build.log}
# ccache, where installed, lets worktrees of one checkout share their object files.
launcher=()
if command -v ccache >/dev/null; then launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"); fi
mkdir -p "$build_dir" "$(dirname "$log")"
if ! { cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$torch_prefix${EXTRA_PREFIX_PATH:+;$EXTRA_PREFIX_PATH}" \
         "-Dbenchmark_DIR=$benchmark_prefix/lib/cmake/benchmark" "-DPython3_EXECUTABLE=$python" "${launcher[@]}" "$@" &&
       cmake --build "$build_dir" -j "$(nproc)"; } >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "build: failed; the whole log is $log" >&2
  exit 1
fi
echo "build: built in $build_dir/ (log: $log)" >&2
echo "$python"
