"""Paired runs: the same measurement in adjacent processes, round after round, so that the host's
drift from one process to the next cancels in each round's ratio (docs/METRICS.md, "Harness
cost"). One tool for the pairings ci/ needs, each a subcommand:

  placement BIN_DIR OUT_DIR       model_parallel with both stages on GPU 0 against single, eager, at
                                  batches 8 and 120, both in one process (adjacent cases); 6 rounds;
                                  the median ratio per batch against the 1.05 bound
  trace BIN_DIR OUT_DIR           the pipeline at split 20 on GPU 0 (1f1b, interleaved-1f1b, zb-h1),
                                  plain and with --trace, each in its own process; 3 rounds; the
                                  median traced/plain ratio per schedule
  before-after BEFORE AFTER OUT   the same single step timed by two parbench binaries in alternating
                                  processes, eager and CUDA graph; 4 rounds; the median after/before
                                  ratio per mode against the 2% bound
  harness-perturb BIN_DIR OUT_DIR single eager at batch 8 plain, with --trace and with
                                  --busy-profile=off, each in its own process; 4 rounds; the median
                                  ratio of each to the plain run of its round

Every result is read through parbench_results (its `fields` and per-repetition counters), never
by parsing names. `--rounds` (or ROUNDS in the environment) sets the rounds; `--summarise` reads
OUT_DIR's files of an earlier run again without running anything. Exit status: 1 where a bound
is missed or a run fails, 2 for bad input.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from parbench_results import cases as pr
from parbench_results.perf_gate import positive_count
from parbench_results.schema import ResultsError


class PairedRunsError(Exception):
    """A run that failed or a result that is not there: one line, exit 1."""


@dataclass(frozen=True)
class Variant:
    """One process of a round: its file stem, which binary (an index into the pairing's binaries)
    and its arguments beyond the pairing's common ones ("{out}" is OUT_DIR, "{round}" the round)."""

    stem: str
    binary: int = 0
    arguments: tuple = ()


@dataclass(frozen=True)
class Pairing:
    name: str
    binaries: tuple  # the names of its binary arguments: ("BIN_DIR",) or ("BEFORE", "AFTER")
    rounds: int
    common: tuple
    variants: tuple
    file: str  # a variant's results file in OUT_DIR: "{stem}" and "{round}"


def _median_step_ms(path: Path) -> list:
    """Each training case of `path` that ran, with its median step_ms over its repetitions."""
    try:
        results = pr.load([str(path)])
    except ResultsError as error:
        raise PairedRunsError(str(error)) from None
    return [(case, case.stats("step_ms").median) for case in results.train_cases() if case.ran], results


def _one(path: Path, **fields) -> tuple:
    """The one case of `path` whose fields hold `fields`, and its median step_ms."""
    cases, _ = _median_step_ms(path)
    def holds(case, key, value):
        return (case.strategy if key == "strategy" else case.fields.get(key)) == str(value)

    found = [(case, step) for case, step in cases if all(holds(case, k, v) for k, v in fields.items())]
    if len(found) != 1:
        wanted = ", ".join(f"{key} {value}" for key, value in fields.items()) or "any"
        raise PairedRunsError(f"{path}: {len(found)} cases that ran with {wanted}, not one")
    return found[0]


# The pairings. Each summary prints one line per round and pair, then the medians; returns the exit status.

PLACEMENT = Pairing(
    "placement", ("BIN_DIR",), 6,
    ("--strategies=single,model_parallel", "--devices=0,0", "--batch=8,120", "--precision=fp32", "--image=128",
     "--iterations=1", "--repetitions=40"),
    (Variant("r"),), "{stem}{round}.json")


def summarise_placement(directory: Path, rounds: int, _settings) -> int:
    status = 0
    for batch in (8, 120):
        ratios = []
        for r in range(1, rounds + 1):
            path = directory / PLACEMENT.file.format(stem="r", round=r)
            _, single = _one(path, strategy="single", batch=batch)
            _, staged = _one(path, strategy="model_parallel", batch=batch)
            ratios.append(staged / single)
            print(f"batch {batch}, round {r}: single {single:.2f} ms, model_parallel "
                  f"{staged:.2f} ms, ratio {ratios[-1]:.3f}")
        median = statistics.median(ratios)
        status |= median > 1.05
        print(f"model_parallel (2 stages on GPU 0) / single, batch {batch}: median {median:.3f} over {rounds} rounds "
              f"(range {min(ratios):.3f}-{max(ratios):.3f}); at most 1.05: {'met' if median <= 1.05 else 'MISSED'}")
    return int(status)


TRACE = Pairing(
    "trace", ("BIN_DIR",), 3,
    ("--strategies=pipeline", "--devices=0,0", "--split-sizes=20", "--schedules=1f1b,interleaved-1f1b,zb-h1",
     "--chunks=2", "--precision=fp32", "--iterations=1", "--repetitions=20"),
    (Variant("plain"), Variant("trace", arguments=("--trace={out}/traces_r{round}",))), "{stem}_r{round}.json")


def _by_schedule(path: Path) -> dict:
    cases, _ = _median_step_ms(path)
    return {case.fields["schedule"]: step for case, step in cases if "schedule" in case.fields}


def summarise_trace(directory: Path, rounds: int, _settings) -> int:
    ratios: dict = {}
    for r in range(1, rounds + 1):
        plain = _by_schedule(directory / TRACE.file.format(stem="plain", round=r))
        traced = _by_schedule(directory / TRACE.file.format(stem="trace", round=r))
        for schedule in plain:
            if schedule not in traced:
                raise PairedRunsError(f"round {r}: {schedule} ran plain but not traced")
            ratios.setdefault(schedule, []).append(traced[schedule] / plain[schedule])
            print(f"round {r}, {schedule}: plain {plain[schedule]:.2f} ms, traced {traced[schedule]:.2f} ms "
                  f"({ratios[schedule][-1]:.3f})")
    for schedule, values in ratios.items():
        print(f"traced / plain, {schedule} split 20 on GPU 0: median {statistics.median(values):.3f} over {rounds} "
              f"pairs (range {min(values):.3f}-{max(values):.3f})")
    return 0


BEFORE_AFTER = Pairing(
    "before-after", ("BEFORE_BINARY", "AFTER_BINARY"), 4,
    ("--strategies=single", "--image=128", "--precision=fp32", "--cuda-graph=off,on", "--iterations=20",
     "--repetitions=5"),
    (Variant("before", 0), Variant("after", 1)), "{stem}.r{round}.json")


def _by_mode(path: Path) -> tuple:
    """graph on/off -> single's median step_ms, and the commit that built the binary."""
    cases, results = _median_step_ms(path)
    modes = {("graph" if case.fields.get("graph") == "on" else "eager"): step for case, step in cases}
    return modes, str(results.runs[0].context.get("git_sha", "unknown"))


def summarise_before_after(directory: Path, rounds: int, settings) -> int:
    status = 0
    for mode in ("eager", "graph"):
        ratios = []
        for r in range(1, rounds + 1):
            (before, before_sha), (after, after_sha) = (
                _by_mode(directory / BEFORE_AFTER.file.format(stem=b, round=r)) for b in ("before", "after"))
            if mode not in before or mode not in after:
                raise PairedRunsError(f"round {r}: single {mode} did not run on both sides")
            ratios.append(after[mode] / before[mode])
            print(f"{mode}, round {r}: before {before[mode]:.2f} ms ({before_sha[:7]}), after {after[mode]:.2f} ms "
                  f"({after_sha[:7]}), after/before {ratios[-1]:.4f}")
        median = statistics.median(ratios)
        met = abs(median - 1) <= 0.02
        status |= not met
        print(f"single {mode}, fp32 b{settings.batch} 128x128: after/before median {median:.4f} over {rounds} pairs "
              f"(range {min(ratios):.4f}-{max(ratios):.4f}); within 2%: {'met' if met else 'MISSED'}")
    return int(status)


HARNESS_PERTURB = Pairing(
    "harness-perturb", ("BIN_DIR",), 4,
    ("--strategies=single", "--batch=8", "--precision=fp32", "--image=128", "--iterations=1", "--repetitions=40"),
    (Variant("plain"), Variant("trace", arguments=("--trace={out}/traces_r{round}",)),
     Variant("busy_off", arguments=("--busy-profile=off",))), "{stem}_r{round}.json")


def summarise_harness_perturb(directory: Path, rounds: int, _settings) -> int:
    ratios: dict = {"trace": [], "busy_off": []}
    for r in range(1, rounds + 1):
        plain_case, plain = _one(directory / HARNESS_PERTURB.file.format(stem="plain", round=r))
        mfu = plain_case.stats("mfu")
        line = f"round {r}: plain {plain:.2f} ms (mfu {mfu.median if mfu else float('nan'):.4f})"
        for variant in ratios:
            _, step = _one(directory / HARNESS_PERTURB.file.format(stem=variant, round=r))
            ratios[variant].append(step / plain)
            line += f", {variant} {step:.2f} ms ({step / plain:.3f})"
        print(line)
    for variant, values in ratios.items():
        print(f"{variant} / plain, single eager batch 8: median {statistics.median(values):.3f} over {rounds} rounds "
              f"(range {min(values):.3f}-{max(values):.3f})")
    return 0


PAIRINGS = {
    PLACEMENT.name: (PLACEMENT, summarise_placement),
    TRACE.name: (TRACE, summarise_trace),
    BEFORE_AFTER.name: (BEFORE_AFTER, summarise_before_after),
    HARNESS_PERTURB.name: (HARNESS_PERTURB, summarise_harness_perturb),
}


def binary_path(pairing: Pairing, given: str) -> str:
    """A BIN_DIR's parbench, or the binary itself (before-after names binaries)."""
    return given if pairing.binaries != ("BIN_DIR",) else str(Path(given) / "parbench")


def run_rounds(pairing: Pairing, binaries: list, directory: Path, rounds: int, extra: tuple = ()) -> None:
    """Every round's variants, in order, each in its own process; its output thrown away as the old
    scripts did. PairedRunsError names the first that fails."""
    directory.mkdir(parents=True, exist_ok=True)
    for r in range(1, rounds + 1):
        for variant in pairing.variants:
            out = directory / pairing.file.format(stem=variant.stem, round=r)
            arguments = [binary_path(pairing, binaries[variant.binary]), *pairing.common, *extra,
                         *(argument.format(out=directory, round=r) for argument in variant.arguments),
                         f"--benchmark_out={out}", "--benchmark_out_format=json"]
            try:
                code = subprocess.run(arguments, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      check=False).returncode
            except OSError as error:
                raise PairedRunsError(f"round {r}, {variant.stem}: cannot run {arguments[0]}: {error}") from None
            if code != 0:
                raise PairedRunsError(f"round {r}, {variant.stem}: {' '.join(arguments)} exited {code}")


def parse_arguments(argv: list | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="paired-runs", description=__doc__.split("\n")[0],
                                     epilog="pairings: " + ", ".join(PAIRINGS) + "; see docs/METRICS.md")
    parser.add_argument("pairing", choices=list(PAIRINGS), help="what to pair")
    parser.add_argument("paths", nargs="+", metavar="BIN_DIR|BEFORE AFTER OUT_DIR",
                        help="BIN_DIR (holding parbench) and OUT_DIR; before-after: BEFORE_BINARY AFTER_BINARY OUT_DIR")
    parser.add_argument("--rounds", type=positive_count, default=None,
                        help="rounds of processes (default: ROUNDS in the environment, else the pairing's own)")
    parser.add_argument("--batch", type=positive_count, default=None,
                        help="before-after: single's batch (default: BATCH in the environment, else 120)")
    parser.add_argument("--summarise", action="store_true",
                        help="read OUT_DIR's files of an earlier run again; run nothing")
    settings = parser.parse_args(argv)
    pairing, _ = PAIRINGS[settings.pairing]
    wanted = len(pairing.binaries) + 1
    if len(settings.paths) != wanted:
        parser.error(f"{settings.pairing} takes {' '.join(pairing.binaries)} OUT_DIR, got {len(settings.paths)} paths")
    for name, default in (("rounds", pairing.rounds), ("batch", 120)):
        if getattr(settings, name) is None:
            from_environment = os.environ.get(name.upper())
            try:
                setattr(settings, name, positive_count(from_environment) if from_environment else default)
            except argparse.ArgumentTypeError as error:
                parser.error(f"{name.upper()} in the environment: {error}")
    return settings


def main(argv: list | None = None) -> int:
    settings = parse_arguments(argv)
    pairing, summarise = PAIRINGS[settings.pairing]
    *binaries, out = settings.paths
    directory = Path(out)
    extra = (f"--batch={settings.batch}",) if pairing is BEFORE_AFTER else ()
    try:
        if not settings.summarise:
            run_rounds(pairing, binaries, directory, settings.rounds, extra)
        return summarise(directory, settings.rounds, settings)
    except PairedRunsError as error:
        print(f"paired-runs: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # python -m parbench_results.paired_runs
    sys.exit(main())
