#!/usr/bin/env bash
# model_parallel with both stages on GPU 0 against single, eager, at batches 8 and 120: both in
# one process (adjacent cases), ROUNDS processes (default 6); medians of 40 single steps. Prints
# each round's ratio and the median ratio per batch against the 1.05 bound (issue 25).
#   ci/placement-pairs.sh BIN_DIR OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:?usage: ci/placement-pairs.sh BIN_DIR OUT_DIR}
out=${2:?usage: ci/placement-pairs.sh BIN_DIR OUT_DIR}
rounds=${ROUNDS:-6}
mkdir -p "$out"
for round in $(seq "$rounds"); do
  "$bin/parbench" --strategies=single,model_parallel --devices=0,0 --batch=8,120 --precision=fp32 --image=128 \
    --iterations=1 --repetitions=40 --benchmark_out="$out/r$round.json" >/dev/null 2>&1 || exit 1
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
from pathlib import Path

directory, rounds = Path(sys.argv[1]), int(sys.argv[2])
status = 0
for batch in (8, 120):
    ratios = []
    for r in range(1, rounds + 1):
        medians = {run["run_name"].split("/")[1]: run["step_ms"]
                   for run in json.load(open(directory / f"r{r}.json"))["benchmarks"]
                   if run.get("aggregate_name") == "median" and f"/batch:{batch}/" in run["run_name"]}
        ratios.append(medians["model_parallel"] / medians["single"])
        print(f"batch {batch}, round {r}: single {medians['single']:.2f} ms, model_parallel "
              f"{medians['model_parallel']:.2f} ms, ratio {ratios[-1]:.3f}")
    median = statistics.median(ratios)
    status |= median > 1.05
    print(f"model_parallel (2 stages on GPU 0) / single, batch {batch}: median {median:.3f} over {rounds} rounds "
          f"(range {min(ratios):.3f}-{max(ratios):.3f}); at most 1.05: {'met' if median <= 1.05 else 'MISSED'}")
sys.exit(status)
PY
