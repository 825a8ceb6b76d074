#!/usr/bin/env bash
# The same single step timed by two parbench binaries, in alternating processes: BEFORE (a
# build of an earlier commit) and AFTER (this one). fp32, 128x128, batch BATCH (default 120),
# eager and CUDA graph, ROUNDS pairs (default 4), 5 repetitions of 20 steps each. Prints each pair's ratio and
# the median ratio per mode against the 2% bound (issue 27: a refactor must not move the step).
#   ci/before-after.sh BEFORE_BINARY AFTER_BINARY OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: ci/before-after.sh BEFORE_BINARY AFTER_BINARY OUT_DIR}
after=${2:?usage: ci/before-after.sh BEFORE_BINARY AFTER_BINARY OUT_DIR}
out=${3:?usage: ci/before-after.sh BEFORE_BINARY AFTER_BINARY OUT_DIR}
rounds=${ROUNDS:-4}
batch=${BATCH:-120}
mkdir -p "$out"
for round in $(seq "$rounds"); do
  for build in before after; do
    binary=$before
    [[ $build == after ]] && binary=$after
    "$binary" --strategies=single --batch="$batch" --image=128 --precision=fp32 --cuda-graph=off,on --iterations=20 \
      --repetitions=5 --benchmark_out="$out/$build.r$round.json" >/dev/null 2>&1 || exit 1
  done
done
python3 - "$out" "$rounds" "$batch" <<'PY'
import json, statistics, sys
from pathlib import Path

directory, rounds, batch = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]


def medians(path):
    """graph on/off -> the median step_ms of single."""
    data = json.load(open(path))
    return {("graph" if "/graph:on" in run["run_name"] else "eager"): run["step_ms"]
            for run in data["benchmarks"] if run.get("aggregate_name") == "median"}, data["context"]["git_sha"]


status = 0
for mode in ("eager", "graph"):
    ratios = []
    for r in range(1, rounds + 1):
        (before, before_sha), (after, after_sha) = (medians(directory / f"{b}.r{r}.json") for b in ("before", "after"))
        ratios.append(after[mode] / before[mode])
        print(f"{mode}, round {r}: before {before[mode]:.2f} ms ({before_sha[:7]}), after {after[mode]:.2f} ms "
              f"({after_sha[:7]}), after/before {ratios[-1]:.4f}")
    median = statistics.median(ratios)
    met = abs(median - 1) <= 0.02
    status |= not met
    print(f"single {mode}, fp32 b{batch} 128x128: after/before median {median:.4f} over {rounds} pairs "
          f"(range {min(ratios):.4f}-{max(ratios):.4f}); within 2%: {'met' if met else 'MISSED'}")
sys.exit(status)
PY
