"""Prints the harness- and executor-cost ratios of one ci/host-cost.sh run (docs/METRICS.md,
"Harness cost"), each with its target, from the files that run wrote into DIR:

  bare_b<N>_r<K>.json   parbench_bare_loop at batch N, round K (one JSON line each)
  parbench/*.json       parbench's own results (Google Benchmark JSON)
  busy_off/*.json       single again with --busy-profile=off, for the profile's own cost
  before/*.json         optional: an earlier build's results, whose graphed cases the same
                        cases of this run must stay within 2% of

  python3 ci/host_cost.py DIR

Every ratio divides two medians of the same call, each over every round's steps or repetitions. Exits 1 if a target is missed, 2 if a file is
missing or unreadable.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from parbench_results.cases import ResultsError, load


def bare_median(directory: Path, batch: int) -> float:
    """The median step of every round's bare loop at `batch`, pooled."""
    samples = []
    for path in sorted(directory.glob(f"bare_b{batch}_r*.json")):
        samples += json.loads(path.read_text().splitlines()[-1])["samples_ms"]
    if not samples:
        raise ValueError(f"no bare loop at batch {batch} in {directory}")
    return statistics.median(samples)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    directory = Path(argv[1])
    try:
        results = load(sorted(str(path) for path in (directory / "parbench").glob("*.json")))
        without_profile = load(sorted(str(path) for path in (directory / "busy_off").glob("*.json")))
        before_paths = sorted(str(path) for path in (directory / "before").glob("*.json"))
        before = load(before_paths) if before_paths else None
        bare = {batch: bare_median(directory, batch) for batch in (8, 20, 120)}
    except (OSError, ValueError, KeyError, ResultsError) as error:
        print(f"host_cost: {error}", file=sys.stderr)
        return 2

    def step_ms(strategy: str, batch: int, graph: str = "off", source=results, **fields: str) -> float | None:
        for case in source.train_cases():
            if (case.ran and case.strategy == strategy and int(case.fields["batch"]) == batch
                    and case.fields.get("graph", "off") == graph
                    and all(case.fields.get(key) == value for key, value in fields.items())):
                return case.stats("step_ms").median
        return None

    rows = []  # (what, numerator ms, denominator ms, ratio bound, aim)

    def compare(what: str, numerator: float | None, denominator: float | None, bound: float, aim: float | None = None):
        rows.append((what, numerator, denominator, bound, aim))

    for batch in (8, 20):
        compare(f"single eager, batch {batch} / bare loop", step_ms("single", batch), bare[batch], 1.05)
    # The busy-time profile runs in a companion process: with it or without, the same step.
    for batch in (8, 20, 120):
        compare(f"single eager, batch {batch}, busy profile on / off", step_ms("single", batch),
                step_ms("single", batch, source=without_profile), 1.05)
    for schedule in ("gpipe", "1f1b"):
        compare(f"pipeline {schedule} split 20, 2 stages on GPU 0 / 6 bare steps at batch 20",
                step_ms("pipeline", 120, split="20", schedule=schedule), 6 * bare[20], 1.0, aim=0.8)
    compare("data_parallel, 2 replicas on GPU 0, batch 120 / single at 120",
            step_ms("data_parallel", 120, replicate="broadcast"), step_ms("single", 120), 1.15)
    for batch in (8, 120):
        compare(f"model_parallel, 2 stages on GPU 0, batch {batch} / single", step_ms("model_parallel", batch),
                step_ms("single", batch), 1.05)

    if before is not None:
        earlier = {case.name: case for case in before.train_cases() if case.ran}
        for case in results.train_cases():
            if case.ran and case.fields.get("graph") == "on" and case.name in earlier:
                compare(f"{case.title()}, batch {case.fields['batch']}, graphed / before",
                        case.stats("step_ms").median, earlier[case.name].stats("step_ms").median, 1.02)

    missed = 0
    print("| ratio | case ms | reference ms | ratio | target |")
    print("| --- | --- | --- | --- | --- |")
    for what, numerator, denominator, bound, aim in rows:
        if numerator is None or denominator is None:
            print(f"| {what} | not run | | | at most {bound:.2f} |")
            missed += 1
            continue
        ratio = numerator / denominator
        verdict = "met" if ratio <= bound else "MISSED"
        missed += ratio > bound
        target = f"at most {bound:.2f}" + (f", aim {aim:.2f}" if aim else "")
        print(f"| {what} | {numerator:.2f} | {denominator:.2f} | {ratio:.3f} | {target}: {verdict} |")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
