#!/usr/bin/env bash
# The harness- and executor-cost check of docs/METRICS.md ("Harness cost"), on one GPU, in one
# call: the bare loop at batches 8, 20 and 120 and parbench's single with and without the busy-time
# profile, in turns, then model_parallel, pipeline and data_parallel (two stages or replicas on
# GPU 0: --devices=0,0), eager and graphed, then the ratios with their targets (ci/host_cost.py).
#   ci/host-cost.sh BIN_DIR OUT_DIR     BIN_DIR holds parbench and parbench_bare_loop
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:?usage: ci/host-cost.sh BIN_DIR OUT_DIR}
out=${2:?usage: ci/host-cost.sh BIN_DIR OUT_DIR}
mkdir -p "$out/parbench" "$out/busy_off"
status=0
common=(--precision=fp32 --image=128 --benchmark_min_time=0.3)

run() {
  local name=$1
  shift
  echo "== $name: parbench $*"
  "$bin/parbench" "${common[@]}" "$@" --benchmark_out="$out/$name.json" --benchmark_out_format=json \
    >"$out/$name.txt" 2>"$out/$name.stderr" || status=1
  grep -E "_median|ERROR" "$out/$name.txt" | sed -E 's/ +/ /g' | cut -c1-200
}
# The host's pace drifts by 10% and more from one process to the next, and single steps stall
# now and then: the bare loop and parbench's single, with the busy-time profile and without,
# take turns, three rounds of each, and each ratio pools the rounds. Both sides are medians of
# single steps: parbench times one step per repetition here (--iterations=1), since a median of
# per-repetition means sits above the steps' median whenever stalls lengthen some steps.
per_step=(--iterations=1 --repetitions=40)
for round in 1 2 3; do
  for batch in 8 20 120; do
    "$bin/parbench_bare_loop" --batch=$batch --steps=40 >"$out/bare_b${batch}_r$round.json" || status=1
    echo "bare loop, batch $batch, round $round: $(python3 -c 'import json,sys; print(json.load(sys.stdin)["step_ms"])' <"$out/bare_b${batch}_r$round.json")"
  done
  run parbench/single_r$round --strategies=single --batch=8,20,120 --cuda-graph=off,on "${per_step[@]}"
  run busy_off/single_r$round --strategies=single --batch=8,20,120 --busy-profile=off "${per_step[@]}"
done
run parbench/model_parallel --strategies=model_parallel --devices=0,0 --batch=8,120 --cuda-graph=off,on
run parbench/pipeline --strategies=pipeline --devices=0,0 --batch=120 --split-sizes=20,60 --schedules=gpipe,1f1b \
  --cuda-graph=off,on
run parbench/data_parallel --strategies=data_parallel --devices=0,0 --batch=120 --cuda-graph=off,on
python3 ci/host_cost.py "$out" || status=1
exit $status
