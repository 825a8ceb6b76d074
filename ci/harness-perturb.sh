#!/usr/bin/env bash
# What parbench's additions around the timed steps cost them: single eager at batch 8 (host
# paced, where any host cost shows), plain, with --trace and with --busy-profile=off, each in its
# own process, in adjacent triples over ROUNDS rounds (default 4); medians of 40 single steps.
# Prints each triple and, per variant, the median ratio to the plain run of its round.
#   ci/harness-perturb.sh BIN_DIR OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:?usage: ci/harness-perturb.sh BIN_DIR OUT_DIR}
out=${2:?usage: ci/harness-perturb.sh BIN_DIR OUT_DIR}
rounds=${ROUNDS:-4}
mkdir -p "$out"
common=(--strategies=single --batch=8 --precision=fp32 --image=128 --iterations=1 --repetitions=40)
for round in $(seq "$rounds"); do
  "$bin/parbench" "${common[@]}" --benchmark_out="$out/plain_r$round.json" >/dev/null 2>&1 || exit 1
  "$bin/parbench" "${common[@]}" --trace="$out/traces_r$round" --benchmark_out="$out/trace_r$round.json" >/dev/null 2>&1 || exit 1
  "$bin/parbench" "${common[@]}" --busy-profile=off --benchmark_out="$out/busy_off_r$round.json" >/dev/null 2>&1 || exit 1
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
from pathlib import Path

directory, rounds = Path(sys.argv[1]), int(sys.argv[2])
def median_entry(name):
    return next(run for run in json.load(open(directory / name))["benchmarks"] if run.get("aggregate_name") == "median")
ratios = {"trace": [], "busy_off": []}
for r in range(1, rounds + 1):
    plain = median_entry(f"plain_r{r}.json")
    line = f"round {r}: plain {plain['step_ms']:.2f} ms (mfu {plain.get('mfu', float('nan')):.4f})"
    for variant in ratios:
        step = median_entry(f"{variant}_r{r}.json")["step_ms"]
        ratios[variant].append(step / plain["step_ms"])
        line += f", {variant} {step:.2f} ms ({step / plain['step_ms']:.3f})"
    print(line)
for variant, values in ratios.items():
    print(f"{variant} / plain, single eager batch 8: median {statistics.median(values):.3f} over {rounds} rounds "
          f"(range {min(values):.3f}-{max(values):.3f})")
PY
