#!/usr/bin/env bash
# The mutation check (docs/METRICS.md, "Every reported number is tested"): each one-line mutant of
# ci/mutants.txt is applied in turn, parbench and its tests rebuilt, the mutant's test run and
# expected to fail, the file restored. Prints a table; exits 1 if a mutant survived or its line
# is not in its file exactly once. Too slow for CI (a rebuild per C++ mutant): run on demand,
#   ci/mutants.sh [--build-dir=build]
# with a configured build folder (BUILD_DIR, default build).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] && python=${PYTHON:-.venv/bin/python}
exec "$python" ci/mutants.py --python "$python" "$@"
