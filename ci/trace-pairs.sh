#!/usr/bin/env bash
# Whether --trace moves the timed steps: the pipeline at split 20 with both stages on GPU 0
# (1f1b, interleaved-1f1b, zb-h1; eager, host paced, where any host cost shows), plain and with
# --trace, each in its own process, in adjacent pairs over ROUNDS rounds (default 3). Prints each
# pair and, per schedule, the median traced/plain ratio.
#   ci/trace-pairs.sh BIN_DIR OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:?usage: ci/trace-pairs.sh BIN_DIR OUT_DIR}
out=${2:?usage: ci/trace-pairs.sh BIN_DIR OUT_DIR}
rounds=${ROUNDS:-3}
mkdir -p "$out"
common=(--strategies=pipeline --devices=0,0 --split-sizes=20 --schedules=1f1b,interleaved-1f1b,zb-h1 --chunks=2
        --precision=fp32 --iterations=1 --repetitions=20)
for round in $(seq "$rounds"); do
  "$bin/parbench" "${common[@]}" --benchmark_out="$out/plain_r$round.json" >/dev/null 2>&1 || exit 1
  "$bin/parbench" "${common[@]}" --trace="$out/traces_r$round" --benchmark_out="$out/trace_r$round.json" >/dev/null 2>&1 || exit 1
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
from pathlib import Path

directory, rounds = Path(sys.argv[1]), int(sys.argv[2])
def medians(name):
    return {run["fields"]["schedule"]: run["step_ms"] for run in json.load(open(directory / name))["benchmarks"]
            if run.get("aggregate_name") == "median"}
ratios = {}
for r in range(1, rounds + 1):
    plain, traced = medians(f"plain_r{r}.json"), medians(f"trace_r{r}.json")
    for schedule in plain:
        ratios.setdefault(schedule, []).append(traced[schedule] / plain[schedule])
        print(f"round {r}, {schedule}: plain {plain[schedule]:.2f} ms, traced {traced[schedule]:.2f} ms "
              f"({ratios[schedule][-1]:.3f})")
for schedule, values in ratios.items():
    print(f"traced / plain, {schedule} split 20 on GPU 0: median {statistics.median(values):.3f} over {rounds} "
          f"pairs (range {min(values):.3f}-{max(values):.3f})")
PY
