#!/usr/bin/env bash
# The same single step timed by two parbench binaries, in alternating processes: BEFORE (a
# build of an earlier commit) and AFTER (this one). fp32, 128x128, batch BATCH (default 120),
# eager and CUDA graph, ROUNDS pairs (default 4), 5 repetitions of 20 steps each. Prints each pair's ratio and
# the median ratio per mode against the 2% bound (issue 27: a refactor must not move the step).
# Kept for its callers: ci/paired-runs before-after does it (plots/parbench_results/paired_runs.py).
#   ci/before-after.sh BEFORE_BINARY AFTER_BINARY OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: ci/before-after.sh BEFORE_BINARY AFTER_BINARY OUT_DIR"
exec python3 ci/paired-runs before-after "${1:?$usage}" "${2:?$usage}" "${3:?$usage}"
