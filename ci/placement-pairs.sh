#!/usr/bin/env bash
# model_parallel with both stages on GPU 0 against single, eager, at batches 8 and 120: both in
# one process (adjacent cases), ROUNDS processes (default 6); medians of 40 single steps. Prints
# each round's ratio and the median ratio per batch against the 1.05 bound (issue 25).
# Kept for its callers: ci/paired-runs placement does it (plots/parbench_results/paired_runs.py).
#   ci/placement-pairs.sh BIN_DIR OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
exec python3 ci/paired-runs placement "${1:?usage: ci/placement-pairs.sh BIN_DIR OUT_DIR}" \
  "${2:?usage: ci/placement-pairs.sh BIN_DIR OUT_DIR}"
