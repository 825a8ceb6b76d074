#!/usr/bin/env bash
# The test command: set-up, build, then every test through ctest (C++ and Python).
# Tests that need a GPU skip themselves where none is present; their reasons are listed last.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
bash ci/build.sh >/dev/null
ctest --test-dir "$build_dir" --output-on-failure -j 2
# GoogleTest writes "<file>:<line>: Skipped" and then the reason.
if grep -q ": Skipped$" "$build_dir/Testing/Temporary/LastTest.log"; then
  echo "Skipped tests and why:"
  grep -A1 ": Skipped$" "$build_dir/Testing/Temporary/LastTest.log" | grep -v -e ": Skipped$" -e "^--$" | sort | uniq -c
fi
