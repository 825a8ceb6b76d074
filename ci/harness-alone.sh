#!/usr/bin/env bash
# The harness target (parbench's single against the bare loop) measured so that the host's drift from one process to the next
# cancels: the bare loop and parbench's single (eager, its defaults: busy profile on) each alone in
# a process at one batch, in adjacent pairs, ROUNDS rounds (default 8). Prints each pair's ratio of
# medians of 40 single steps, then per batch the median ratio and its quartiles against the 1.05
# bound (docs/METRICS.md, "Harness cost"). Exits 1 if a median ratio is above it.
#   ci/harness-alone.sh BIN_DIR OUT_DIR     BIN_DIR holds parbench and parbench_bare_loop
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:?usage: ci/harness-alone.sh BIN_DIR OUT_DIR}
out=${2:?usage: ci/harness-alone.sh BIN_DIR OUT_DIR}
rounds=${ROUNDS:-8}
mkdir -p "$out"
for round in $(seq "$rounds"); do
  for batch in 8 20; do
    "$bin/parbench_bare_loop" --batch="$batch" --steps=40 >"$out/bare_b${batch}_r$round.json" || exit 1
    "$bin/parbench" --strategies=single --batch="$batch" --precision=fp32 --image=128 --iterations=1 --repetitions=40 \
      --benchmark_out="$out/single_b${batch}_r$round.json" --benchmark_out_format=json >/dev/null 2>&1 || exit 1
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
from pathlib import Path

directory, rounds = Path(sys.argv[1]), int(sys.argv[2])
status = 0
for batch in (8, 20):
    ratios = []
    for r in range(1, rounds + 1):
        bare = json.load(open(directory / f"bare_b{batch}_r{r}.json"))["step_ms"]["median"]
        runs = json.load(open(directory / f"single_b{batch}_r{r}.json"))["benchmarks"]
        single = next(run["step_ms"] for run in runs if run.get("aggregate_name") == "median")
        ratios.append(single / bare)
        print(f"batch {batch}, round {r}: single {single:.2f} ms, bare loop {bare:.2f} ms, ratio {single / bare:.3f}")
    median = statistics.median(ratios)
    low, _, high = statistics.quantiles(ratios, n=4)
    verdict = "met" if median <= 1.05 else "MISSED"
    status |= median > 1.05
    print(f"single eager / bare loop, batch {batch}: median ratio {median:.3f} over {rounds} pairs "
          f"(quartiles {low:.3f}-{high:.3f}); at most 1.05: {verdict}")
sys.exit(status)
PY
