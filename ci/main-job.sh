#!/usr/bin/env bash
# The main job: set-up, build, the default benchmark (the CPU preset on a machine without a
# GPU, with a short run of the tiny transformer beside it), then plots and a report. Results land in results/<UTC time>/ (or $RESULTS_DIR).
# Extra arguments go to parbench, e.g. --benchmark_filter=single.
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(bash ci/build.sh | tail -n 1)
results=${RESULTS_DIR:-results/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$results"
# A failed case (exit 1) is in the JSON and the report still comes; bad input (exit 2) wrote nothing.
status=0
# --trace: one extra step per case, outside the timed ones, from which the report draws the
# pipeline cases' measured timelines.
./build/parbench --benchmark_out="$results/parbench.json" --benchmark_out_format=json --trace="$results/traces" "$@" ||
  status=$?
if [[ $status == 2 ]]; then
  exit 2
fi
runs=("$results/parbench.json")
# Without a GPU, the tiny transformer too, every strategy on CPU stand-ins (a short run, about
# half a minute): the code paths of the language models, not what they achieve on GPUs. Traced
# as well, so the report draws the measured and predicted timelines of the schedules the
# default run leaves out (interleaved-1f1b, zb-h1).
gpu_count=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["context"]["gpu_count"])' "$results/parbench.json")
if [[ $gpu_count == 0 ]]; then
  ./build/parbench --preset=cpu --models=tinygpt --split-sizes=4 --schedules=1f1b,interleaved-1f1b,zb-h1 \
    --allreduce=off --repetitions=3 --iterations=5 --trace="$results/traces" --benchmark_out="$results/tinygpt.json" \
    --benchmark_out_format=json || status=$?
  runs+=("$results/tinygpt.json")
fi
"$python" reports/make_report.py "$results" "${runs[@]}"
echo "main-job: results, figures and REPORT.md are in $results" >&2
exit "$status"
