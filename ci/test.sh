#!/usr/bin/env bash
# The test command: set-up, build, then every test through ctest (C++ and Python).
# Tests that need a GPU skip themselves, saying why, where none is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/build.sh >/dev/null
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j 2
