#!/usr/bin/env bash
# Whether --trace moves the timed steps: the pipeline at split 20 with both stages on GPU 0
# (1f1b, interleaved-1f1b, zb-h1; eager, host paced, where any host cost shows), plain and with
# --trace, each in its own process, in adjacent pairs over ROUNDS rounds (default 3). Prints each
# pair and, per schedule, the median traced/plain ratio.
# Kept for its callers: ci/paired-runs trace does it (plots/parbench_results/paired_runs.py).
#   ci/trace-pairs.sh BIN_DIR OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
exec python3 ci/paired-runs trace "${1:?usage: ci/trace-pairs.sh BIN_DIR OUT_DIR}" \
  "${2:?usage: ci/trace-pairs.sh BIN_DIR OUT_DIR}"
