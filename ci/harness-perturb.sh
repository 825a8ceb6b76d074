#!/usr/bin/env bash
# What parbench's additions around the timed steps cost them: single eager at batch 8 (host
# paced, where any host cost shows), plain, with --trace and with --busy-profile=off, each in its
# own process, in adjacent triples over ROUNDS rounds (default 4); medians of 40 single steps.
# Prints each triple and, per variant, the median ratio to the plain run of its round.
# Kept for its callers: ci/paired-runs harness-perturb does it (plots/parbench_results/paired_runs.py).
#   ci/harness-perturb.sh BIN_DIR OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
exec python3 ci/paired-runs harness-perturb "${1:?usage: ci/harness-perturb.sh BIN_DIR OUT_DIR}" \
  "${2:?usage: ci/harness-perturb.sh BIN_DIR OUT_DIR}"
