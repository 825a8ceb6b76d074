"""Performance-regression gate: compares a candidate parbench JSON run against a baseline, or
against a window of earlier baselines.

A benchmark regresses when its candidate median is worse than the baseline median by more
than the threshold AND a two-sided Mann-Whitney U test over the repetitions (exact for small
samples) rejects "same distribution" at alpha, after Holm's step-down correction over the
family of tests: every benchmark the run tested and, beside them, a stratified U test of a
shift common to all of them, so that a uniform slowdown too small for any one benchmark's test
is still caught. Where a slowdown beyond the threshold could not have been significant whatever
its size, the gate says so and exits 2 (underpowered) rather than pass. docs/PERF_GATE.md
describes the decision, the exit codes and the options; docs/JSON.md the input, which
parbench_results.schema reads.

Plain Python 3 on purpose: CI machines run it without scipy or numpy (--trend alone needs matplotlib).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import traceback
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from parbench_results import facts, rank_tests
from parbench_results.schema import SECONDS_PER_UNIT, ResultsError, case_name, read_document

EXIT_PASS = 0
EXIT_REGRESSION = 1
EXIT_UNUSABLE = 2

# Context keys that must agree: with other GPUs or another software stack the times are not comparable.
CONTEXT_KEYS_THAT_MUST_MATCH = ("gpu_names", "gpu_count", "libtorch_version", "cuda_version")
# On a run without GPUs (gpu_count 0, or devices cpu) the CPU decides the times: its model and
# core count must agree too, and the threads the CPU devices ran on wherever both runs record them.
CPU_CONTEXT_KEYS_THAT_MUST_MATCH = ("cpu_model", "num_cpus")
CPU_THREAD_KEYS = ("threads_per_device", "intra_op_threads", "omp_num_threads", "mkl_num_threads")
# With 4 repetitions a side the exact two-sided p-value cannot go below 2/70 = 0.029, with 3 not
# below 0.1: fewer than 5 leaves the U test next to no power at alpha = 0.05.
MIN_REPETITIONS_FOR_U_TEST = 5
# The most bytes a run's file may hold: parbench's largest runs write a few MiB. A FILE.json.gz is
# read decompressed, and the cap holds for its decompressed content (parbench_results.schema).
MAX_INPUT_BYTES = 64 * 1024 * 1024
# The files of a --window folder that are runs.
RUN_FILE_SUFFIXES = (".json", ".json.gz")

# Verdicts of one benchmark.
PASS = "pass"
IMPROVED = "improved"
REGRESSION = "REGRESSION"
SLOWER_NOT_SIGNIFICANT = "slower, not significant"
# Worse beyond the threshold, not significant, and no result of these repetitions could have been:
# the gate cannot tell, so it exits 2 unless a regression is found elsewhere.
SLOWER_UNDERPOWERED = "slower, underpowered"
FASTER_NOT_SIGNIFICANT = "faster, not significant"
TOO_FEW_REPETITIONS = "too few repetitions"
# The baseline measured the benchmark and the candidate did not: it is absent, or every
# repetition errored (failed, or skipped: "skipped: <reason>"). Both fail unless --allow-missing.
MISSING_IN_CANDIDATE = "MISSING in candidate"
FAILED_IN_CANDIDATE = "FAILED in candidate"
LOST_VERDICTS = {MISSING_IN_CANDIDATE, FAILED_IN_CANDIDATE}
ONLY_IN_BASELINE = "only in baseline"  # and not measured there either
ONLY_IN_CANDIDATE = "only in candidate"
ERROR_IN_BASELINE = "error in baseline"
ERROR_IN_BOTH = "error in both"
NO_METRIC = "no metric"
COMPARED_VERDICTS = {PASS, IMPROVED, REGRESSION, SLOWER_NOT_SIGNIFICANT, SLOWER_UNDERPOWERED, FASTER_NOT_SIGNIFICANT}
# Row kinds: one benchmark, or the stratified test of a shift common to every benchmark tested.
CASE = "case"
COMMON = "common"


class UnusableInput(Exception):
    """An input the gate cannot judge: exit 2."""


class UnknownMetric(Exception):
    """A --metric the runs' counter table does not declare with a direction: exit 2, one line."""


TIME_METRIC = "time"  # real_time, normalised by time_unit: not a counter


@dataclass(frozen=True)
class Metric:
    """What --metric compares: its name, unit and whether higher is better."""

    name: str
    unit: str
    higher_is_better: bool


def resolve_metric(name: str, contexts: list) -> Metric:
    """`time`, or a counter the runs' contexts declare (schema 1.8.0's `counters`; the built-in
    table for older files) with a direction; UnknownMetric otherwise, naming the allowed ones."""
    if name == TIME_METRIC:
        return Metric(TIME_METRIC, "s", False)
    table = None
    for context in contexts:
        try:
            found = facts.counter_table(context)
        except facts.FactsError as error:
            raise UnusableInput(str(error)) from None
        table = found if table is None else table.merged(found)
    table = table or facts.legacy_counter_table()
    fact = table.find(name)
    if fact is None or fact.better not in ("higher", "lower"):
        allowed = [TIME_METRIC] + [fact.key for fact in table.facts if fact.better in ("higher", "lower")]
        why = "is not a counter the runs declare" if fact is None else "is a counter without a better direction"
        raise UnknownMetric(f"--metric {name} {why}; allowed: {', '.join(allowed)} "
                            "(<i>, <r>, <s>: a device, rank or stage index)")
    return Metric(name, fact.unit, fact.better == "higher")


@dataclass
class Run:
    """One parbench JSON file, reduced to the chosen metric of each error-free repetition."""

    path: str
    context: dict
    names: list = field(default_factory=list)  # every run name, in file order
    samples: dict = field(default_factory=dict)  # run name -> metric value per error-free repetition
    errors: dict = field(default_factory=dict)  # run name -> error message per errored repetition
    unmeasured: set = field(default_factory=set)  # run names whose repetitions lack the metric
    throttled: dict = field(default_factory=dict)  # run name -> repetitions flagged `throttled` (docs/METRICS.md)
    stalled: dict = field(default_factory=dict)  # run name -> repetitions flagged `stalled` (docs/METRICS.md)


@dataclass
class Row:
    """One line of the table: a benchmark, or (kind COMMON) the stratified test across them.
    A benchmark given a U test also carries it as the attribute u_test (not a field: not written)."""

    name: str
    verdict: str
    baseline_median: float | None = None
    candidate_median: float | None = None
    change_pct: float | None = None  # candidate median against baseline median, in the metric's own sign
    p_value: float | None = None
    baseline_repetitions: int = 0
    candidate_repetitions: int = 0
    p_adjusted: float | None = None  # p_value after the --correction over the run's tested benchmarks
    threshold_only: bool = False  # too few repetitions for the U test: judged by the threshold alone
    decided_by: str = ""  # the rule that settled the verdict, for the output
    candidate_error: str | None = None  # why the candidate has no measurement: its error messages
    kind: str = CASE
    test: str | None = None  # how p_value was computed: exact or asymptotic
    p_min: float | None = None  # the smallest p-value any result with these repetitions (and ties) could give
    p_min_adjusted: float | None = None  # p_min in place of p_value, after the --correction with the others as found


@dataclass
class Report:
    settings: argparse.Namespace
    rows: list = field(default_factory=list)
    unusable: list = field(default_factory=list)  # why the gate cannot judge (exit 2)
    warnings: list = field(default_factory=list)
    errors: list = field(default_factory=list)  # errored repetitions, one line per benchmark and side
    baseline_context: dict = field(default_factory=dict)
    candidate_context: dict = field(default_factory=dict)
    window: list = field(default_factory=list)  # with --window: the baseline runs pooled, oldest first
    underpowered: list = field(default_factory=list)  # why the tests could not decide (exit 2 unless a regression)
    common: Row | None = None  # the stratified test of a shift common to the benchmarks tested (two or more)

    def judged_rows(self) -> list:
        """The benchmarks' rows and the common shift's."""
        return self.rows + ([self.common] if self.common else [])

    def failing_rows(self) -> list:
        failing = {REGRESSION} | (set() if self.settings.allow_missing else LOST_VERDICTS)
        return [row for row in self.judged_rows() if row.verdict in failing]

    def underpowered_reasons(self) -> list:
        return self.underpowered + [
            f"{row.name}: worse by {abs(row.change_pct):.1f}% but not significant, and could not have been: "
            f"the most extreme result at {row.baseline_repetitions}/{row.candidate_repetitions} repetitions "
            f"would give an adjusted p of {row.p_min_adjusted:.4g}, not below alpha {self.settings.alpha:g}"
            for row in self.judged_rows() if row.verdict == SLOWER_UNDERPOWERED]

    @property
    def exit_code(self) -> int:
        # Unusable input is not judged; a regression found is conclusive; tests that could not
        # decide are not a pass.
        if self.unusable:
            return EXIT_UNUSABLE
        if self.failing_rows():
            return EXIT_REGRESSION
        return EXIT_UNUSABLE if self.underpowered_reasons() else EXIT_PASS

    @property
    def outcome(self) -> str:
        if self.exit_code == EXIT_UNUSABLE and not self.unusable:
            return "underpowered"
        return {EXIT_PASS: "pass", EXIT_REGRESSION: "regression", EXIT_UNUSABLE: "unusable"}[self.exit_code]


def mann_whitney_u_p_value(x: list, y: list) -> float:
    """Two-sided Mann-Whitney U test p-value by the normal approximation with tie and
    continuity corrections, whatever the sizes: scipy.stats.mannwhitneyu(x, y, method='asymptotic').
    The gate itself uses rank_tests.u_test: exact up to rank_tests.EXACT_MAX_REPETITIONS."""
    return rank_tests.asymptotic_p_value(x, y)


def load_run(path: str, metric: str) -> Run:
    try:
        document = read_document(path, max_bytes=MAX_INPUT_BYTES)
    except ResultsError as problem:
        raise UnusableInput(str(problem)) from None
    run = Run(path=path, context=document["context"])
    # One measurement per (case, repetition): a file concatenated or edited, or a second run
    # appended at other --iterations (another run name, the same case), would be pooled and could
    # outvote the rest, hiding a regression.
    seen = {}  # (case, repetition index) -> the entry's index
    run_names = {}  # case -> (its run name, the first entry's index)
    for index, entry in enumerate(document["benchmarks"]):
        where = f"{path}: benchmarks[{index}]"
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and "run_type" in entry
                and isinstance(entry.get("run_name", ""), str)):
            raise UnusableInput(f"{where} is not a Google Benchmark entry")
        if entry["run_type"] != "iteration":
            continue  # aggregates: the gate works from the repetitions themselves
        run_name = entry.get("run_name", entry["name"])
        # Without Google Benchmark's suffixes a baseline with fixed iterations matches a candidate without.
        name = case_name(run_name)
        repetition = entry.get("repetition_index")
        if repetition is None:
            raise UnusableInput(f"{where} ({name}) has no repetition_index: each repetition must carry its "
                                "integer index, as Google Benchmark writes it")
        if isinstance(repetition, bool) or not isinstance(repetition, int) or repetition < 0:
            raise UnusableInput(f"{where} ({name}) has repetition_index {json.dumps(repetition)}: "
                                "it must be a whole number (0, 1, ...), not a float, string or negative")
        if name in run_names and run_names[name][0] != run_name:
            raise UnusableInput(f"{where}: the case {name} appears under two run names, {run_names[name][0]} "
                                f"(benchmarks[{run_names[name][1]}]) and {run_name}: one run of each case per "
                                "file (a second run appended at other --iterations?)")
        run_names.setdefault(name, (run_name, index))
        if (name, repetition) in seen:
            raise UnusableInput(f"{where} repeats {name} repetition_index {repetition} "
                                f"(benchmarks[{seen[(name, repetition)]}]): each repetition must appear once")
        seen[(name, repetition)] = index
        if name not in run.names:
            run.names.append(name)
        errored = entry.get("error_occurred", False)
        if not isinstance(errored, bool):
            raise UnusableInput(f"{where} ({name}) has error_occurred {json.dumps(errored)}: "
                                "it must be true or false (a JSON boolean)")
        for flag in ("throttled", "stalled"):
            value = entry.get(flag)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value)):
                raise UnusableInput(f"{where} ({name}) has {flag} {json.dumps(value)}: "
                                    "it must be a number: 1 where flagged, 0 or absent where not")
        if errored:
            run.errors.setdefault(name, []).append(entry.get("error_message", ""))
            continue
        if is_flagged(entry, "throttled"):
            run.throttled[name] = run.throttled.get(name, 0) + 1
        if is_flagged(entry, "stalled"):
            run.stalled[name] = run.stalled.get(name, 0) + 1
        try:
            value = metric_value(entry, metric)
        except UnusableInput as problem:
            raise UnusableInput(f"{path}: {problem}") from None
        if value is None:
            run.unmeasured.add(name)
        else:
            run.samples.setdefault(name, []).append(value)
    if not run.names:
        raise UnusableInput(f"{path}: no per-repetition entries (run_type 'iteration'); "
                            "was it written with --benchmark_report_aggregates_only?")
    return run


def is_flagged(entry: dict, flag: str) -> bool:
    """Whether a repetition carries parbench's counter `flag` at 1: `throttled` (schema 1.5.0: a GPU
    ran throttled) or `stalled` (1.5.0: a stall inside the repetition); docs/METRICS.md."""
    value = entry.get(flag)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def flagged_reason(candidate: Run, flag: str, option: str) -> str | None:
    """One line refusing a candidate with repetitions flagged `flag` (throttled, stalled), or None."""
    counts = getattr(candidate, flag)
    if not counts:
        return None
    total = sum(counts.values())
    cases = ", ".join(f"{name} ({count} of {max(count, len(candidate.samples.get(name, [])))})"
                      for name, count in counts.items())
    return (f"the candidate has {total} {flag} repetition(s) in {len(counts)} benchmark(s) "
            f"({option}): {cases}")


def throttled_reason(candidate: Run) -> str | None:
    """One line refusing a candidate with throttled repetitions (--refuse-throttled), or None."""
    return flagged_reason(candidate, "throttled", "--refuse-throttled")


def stalled_reason(candidate: Run) -> str | None:
    """One line refusing a candidate with stalled repetitions (--refuse-stalled), or None."""
    return flagged_reason(candidate, "stalled", "--refuse-stalled")


def metric_value(entry: dict, metric: str) -> float | None:
    """The entry's metric, real_time in seconds or a counter (items_per_second, ...); None when
    the entry has no such counter (comm/ cases have no items_per_second)."""
    if metric == TIME_METRIC:
        unit = entry.get("time_unit")
        if unit not in SECONDS_PER_UNIT:
            raise UnusableInput(f"{entry['name']}: unknown time_unit {unit!r}")
        value, scale = entry.get("real_time"), SECONDS_PER_UNIT[unit]
    else:
        if metric not in entry:
            return None
        value, scale = entry[metric], 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UnusableInput(f"{entry['name']}: {metric} value {value!r} is not a positive number")
    return value * scale


def is_cpu_run(context: dict) -> bool:
    """A run whose cases ran on the CPU: no GPU visible (gpu_count 0) or devices cpu."""
    return str(context.get("gpu_count")) == "0" or str(context.get("devices")) == "cpu"


def context_keys_to_compare(baseline: dict, candidate: dict) -> list:
    """The context keys whose values must agree between these two runs."""
    keys = list(CONTEXT_KEYS_THAT_MUST_MATCH)
    if is_cpu_run(baseline) or is_cpu_run(candidate):
        keys += CPU_CONTEXT_KEYS_THAT_MUST_MATCH
        # Older runs lack the thread keys: compared where both record them.
        keys += [key for key in CPU_THREAD_KEYS if key in baseline and key in candidate]
    return keys


def compare_contexts(baseline: Run, candidate: Run) -> list:
    mismatches = []
    for key in context_keys_to_compare(baseline.context, candidate.context):
        base_value, cand_value = baseline.context.get(key, "(absent)"), candidate.context.get(key, "(absent)")
        if str(base_value) != str(cand_value):
            what = (" (the CPU devices' threads: times at other thread counts are not comparable)"
                    if key in CPU_THREAD_KEYS else "")
            mismatches.append(f"context {key} differs: baseline {str(base_value)!r}, candidate {str(cand_value)!r}{what}")
    return mismatches


def judge(name: str, base: list, cand: list, settings: argparse.Namespace) -> Row:
    """The row of a benchmark measured on both sides, with its U test; its verdict waits for
    decide(), once every benchmark's p-value is known."""
    row = Row(name=name, verdict=PASS, baseline_repetitions=len(base), candidate_repetitions=len(cand))
    row.baseline_median, row.candidate_median = statistics.median(base), statistics.median(cand)
    row.change_pct = 100 * (row.candidate_median / row.baseline_median - 1)
    testable = min(len(base), len(cand)) >= MIN_REPETITIONS_FOR_U_TEST
    if not testable and settings.too_few_repetitions == "fail":
        row.verdict = TOO_FEW_REPETITIONS
        return row
    row.threshold_only = not testable
    if testable:
        row.u_test = rank_tests.u_test(base, cand)
        row.p_value, row.p_min, row.test = row.u_test.p_value, row.u_test.min_p_value, row.u_test.method
    return row


def holm_adjusted(p_values: list) -> list:
    """Holm's step-down adjusted p-values, in the order given: the i-th smallest of m is
    multiplied by m - i + 1 (i from 1), and each is raised to the largest before it. Rejecting
    where the adjusted value is below alpha keeps the chance of any false rejection among the
    m below alpha, whatever their dependence (Holm 1979)."""
    order = sorted(range(len(p_values)), key=lambda index: p_values[index])
    adjusted = [0.0] * len(p_values)
    running = 0.0
    for position, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - position) * p_values[index]))
        adjusted[index] = running
    return adjusted


def corrected(p_values: list, settings: argparse.Namespace) -> list:
    return holm_adjusted(p_values) if settings.correction == "holm" else list(p_values)


def common_row(tested: list) -> Row:
    """The stratified U test of a shift common to every tested benchmark, as a row: its change
    is the median of theirs."""
    test = rank_tests.stratified_u_test([row.u_test for row in tested])
    return Row(name=f"common shift of the {len(tested)} benchmarks tested", verdict=PASS, kind=COMMON,
               change_pct=statistics.median(row.change_pct for row in tested), p_value=test.p_value,
               p_min=test.min_p_value, test=test.method,
               baseline_repetitions=sum(row.baseline_repetitions for row in tested),
               candidate_repetitions=sum(row.candidate_repetitions for row in tested))


def decide(rows: list, settings: argparse.Namespace) -> tuple:
    """Sets the verdict of every compared row, and judges the common-shift row where two or more
    benchmarks were tested. The family of tests: every benchmark with a U test and the common
    shift; their p-values are corrected together. A row's verdict: the threshold first, then
    the corrected p-value; a row worse beyond the threshold and not significant is underpowered
    when even its smallest achievable p-value, in place of its own, would not be significant.
    Returns the common-shift row (None with fewer than two benchmarks tested) and why the family
    as a whole is underpowered (no test in it could reach alpha at these repetitions), or []."""
    tested = [row for row in rows if row.p_value is not None and row.kind == CASE]
    common = common_row(tested) if len(tested) >= 2 else None
    family = tested + ([common] if common else [])
    p_values = [row.p_value for row in family]
    for index, (row, p_adjusted) in enumerate(zip(family, corrected(p_values, settings))):
        row.p_adjusted = p_adjusted
        at_best = p_values[:index] + [row.p_min] + p_values[index + 1:]
        row.p_min_adjusted = corrected(at_best, settings)[index]
    threshold = settings.threshold / 100
    correction_name = "Holm-adjusted p" if settings.correction == "holm" else "p"
    for row in rows + ([common] if common else []):
        if row.change_pct is None or row.verdict == TOO_FEW_REPETITIONS:
            continue
        change = row.change_pct / 100
        worse_by = -change if settings.resolved_metric.higher_is_better else change
        if abs(worse_by) <= threshold:
            row.verdict, row.decided_by = PASS, f"threshold: within {settings.threshold:g}%"
            continue
        if row.threshold_only:
            significant = True
            row.decided_by = f"threshold alone (<{MIN_REPETITIONS_FOR_U_TEST} repetitions a side)"
        else:
            significant = row.p_adjusted < settings.alpha
            row.decided_by = (f"{correction_name} {row.p_adjusted:.4f} {'<' if significant else '>='} "
                              f"alpha {settings.alpha:g}")
        if worse_by > 0:
            if significant:
                row.verdict = REGRESSION
            elif row.p_min_adjusted >= settings.alpha:
                row.verdict = SLOWER_UNDERPOWERED
                row.decided_by += f"; at best {row.p_min_adjusted:.4f} with these repetitions"
            else:
                row.verdict = SLOWER_NOT_SIGNIFICANT
        else:
            row.verdict = IMPROVED if significant else FASTER_NOT_SIGNIFICANT
    if not family:
        return common, []
    # Whatever the values, with these repetitions: the smallest p-value each test could give without ties.
    design = [rank_tests.design_min_p_value(row.baseline_repetitions, row.candidate_repetitions) for row in tested]
    if len(tested) >= 2:
        design.append(rank_tests.design_stratified_min_p_value(
            [(row.baseline_repetitions, row.candidate_repetitions) for row in tested]))
    best = min(corrected(design, settings))
    if best < settings.alpha:
        return common, []
    correction = (f"after Holm's correction over {len(family)} tests" if settings.correction == "holm"
                  else "uncorrected")
    return common, [f"no test could reach significance: the smallest p-value these repetitions allow is "
                    f"{best:.4g} {correction}, not below alpha {settings.alpha:g}; run more repetitions"]


def unjudged_verdict(name: str, baseline: Run, candidate: Run) -> str | None:
    """The verdict of a benchmark that cannot be compared, or None when it can."""
    if name not in candidate.names:
        return MISSING_IN_CANDIDATE if name in baseline.samples else ONLY_IN_BASELINE
    if name not in baseline.names:
        return ONLY_IN_CANDIDATE
    base_measured, cand_measured = name in baseline.samples, name in candidate.samples
    if name in baseline.unmeasured or name in candidate.unmeasured:
        return NO_METRIC
    if not base_measured and not cand_measured:
        return ERROR_IN_BOTH
    if not base_measured:
        return ERROR_IN_BASELINE
    if not cand_measured:
        return FAILED_IN_CANDIDATE
    return None


def compare(baseline: Run, candidate: Run, settings: argparse.Namespace) -> Report:
    report = Report(settings=settings, baseline_context=baseline.context, candidate_context=candidate.context)
    mismatches = compare_contexts(baseline, candidate)
    if settings.allow_context_mismatch:
        report.warnings += mismatches
    else:
        report.unusable += [m + " (--allow-context-mismatch compares anyway)" for m in mismatches]

    for name in baseline.names + [n for n in candidate.names if n not in baseline.names]:
        verdict = unjudged_verdict(name, baseline, candidate)
        if verdict is None:
            report.rows.append(judge(name, baseline.samples[name], candidate.samples[name], settings))
        else:
            base, cand = baseline.samples.get(name, []), candidate.samples.get(name, [])
            errors = sorted(set(candidate.errors.get(name, [])))
            report.rows.append(Row(name=name, verdict=verdict,
                                   baseline_median=statistics.median(base) if base else None,
                                   candidate_median=statistics.median(cand) if cand else None,
                                   baseline_repetitions=len(base), candidate_repetitions=len(cand),
                                   candidate_error="; ".join(errors) if errors else None))

    for side, run in (("baseline", baseline), ("candidate", candidate)):
        for name, messages in run.errors.items():
            total = len(messages) + len(run.samples.get(name, []))
            reasons = "; ".join(sorted(set(messages)))
            report.errors.append(f"{side}: {name}: {len(messages)} of {total} repetitions errored: {reasons}")

    if getattr(settings, "refuse_throttled", False):
        reason = throttled_reason(candidate)
        if reason:
            report.unusable.append(reason)
    if getattr(settings, "refuse_stalled", False):
        reason = stalled_reason(candidate)
        if reason:
            report.unusable.append(reason)

    report.common, underpowered = decide(report.rows, settings)
    report.underpowered += underpowered
    too_few = [row.name for row in report.rows if row.verdict == TOO_FEW_REPETITIONS]
    if too_few:
        report.unusable.append(f"{len(too_few)} benchmark(s) have fewer than {MIN_REPETITIONS_FOR_U_TEST} "
                               "repetitions a side for the U test (--too-few-repetitions=fail)")
    # A candidate that lost every benchmark the baseline measured failed: that is a verdict, not
    # unusable input. Runs with no case in common (another model, another case set) are not.
    if not set(baseline.names) & set(candidate.names):
        report.unusable.append(f"nothing in common: none of the baseline's {len(baseline.names)} benchmarks "
                               f"(e.g. {baseline.names[0]}) is among the candidate's {len(candidate.names)} "
                               f"(e.g. {candidate.names[0]})")
        return report
    judged = COMPARED_VERDICTS | {TOO_FEW_REPETITIONS} | (set() if settings.allow_missing else LOST_VERDICTS)
    if not any(row.verdict in judged for row in report.rows):
        report.unusable.append("no benchmark has measurements on both sides: nothing was compared")
    return report


# A window of earlier baselines (--window DIR).

@dataclass
class History:
    """The runs of a --window folder that match the candidate's GPUs and software, oldest
    commit first, and the last --window-size commits' runs pooled into one baseline."""

    commits: list  # (git_sha, [Run, ...]) per commit, oldest first
    baseline: Run
    window: list  # {"path", "git_sha", "date"} of each pooled run


def run_date(run: Run):
    """The run's context.date as a datetime, to order runs; unparsable dates sort first."""
    try:
        return datetime.fromisoformat(str(run.context.get("date", "")))
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)


def pool(runs: list, label: str) -> Run:
    """One baseline from several runs: every repetition of every run, per benchmark."""
    pooled = Run(path=label, context=runs[-1].context)
    for run in runs:
        pooled.names += [name for name in run.names if name not in pooled.names]
        for name, values in run.samples.items():
            pooled.samples.setdefault(name, []).extend(values)
        for name, messages in run.errors.items():
            pooled.errors.setdefault(name, []).extend(messages)
        pooled.unmeasured |= run.unmeasured
    return pooled


def load_history(directory: str, candidate: Run, settings: argparse.Namespace) -> History:
    """The folder's JSON runs keyed by commit (context.git_sha) and GPUs (context.gpu_names):
    those whose CONTEXT_KEYS_THAT_MUST_MATCH equal the candidate's, other than the candidate's
    own commit, ordered by their newest run's date."""
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(RUN_FILE_SUFFIXES))
    except OSError as error:
        raise UnusableInput(f"--window {directory}: cannot list: {error}") from None
    candidate_path = os.path.realpath(candidate.path)
    runs = [load_run(os.path.join(directory, name), settings.metric) for name in names
            if os.path.realpath(os.path.join(directory, name)) != candidate_path]
    own_sha = candidate.context.get("git_sha")
    matching = [run for run in runs if not compare_contexts(run, candidate)
                and (own_sha in (None, "unknown") or run.context.get("git_sha") != own_sha)]
    if not matching:
        keys = ", ".join(f"{key}={str(candidate.context.get(key, '(absent)'))!r}"
                         for key in context_keys_to_compare(candidate.context, candidate.context))
        raise UnusableInput(f"--window {directory}: none of its {len(runs)} runs is of another commit with the "
                            f"candidate's {keys}")
    by_commit: dict = {}
    for run in sorted(matching, key=run_date):
        by_commit.setdefault(str(run.context.get("git_sha", "unknown")), []).append(run)
    commits = sorted(by_commit.items(), key=lambda item: run_date(item[1][-1]))
    window_runs = [run for _, runs_of_commit in commits[-settings.window_size:] for run in runs_of_commit]
    window = [{"path": run.path, "git_sha": run.context.get("git_sha"), "date": run.context.get("date")}
              for run in window_runs]
    return History(commits=commits, baseline=pool(window_runs, directory), window=window)


def trend_series(history: History, candidate: Run) -> tuple:
    """Commit labels (short SHAs, then "candidate") and, per benchmark, its median at each
    (None where that commit did not measure it): every repetition of the commit's runs pooled."""
    columns = [(sha[:8], pool(runs, sha)) for sha, runs in history.commits] + [("candidate", candidate)]
    names = []
    for _, run in columns:
        names += [name for name in run.names if name not in names]
    series = {name: [statistics.median(run.samples[name]) if run.samples.get(name) else None for _, run in columns]
              for name in names}
    return [label for label, _ in columns], series


def draw_trend(path: str, history: History, candidate: Run, settings: argparse.Namespace) -> None:
    """One small plot per benchmark of its median over the commits, the candidate last, in red."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise UnusableInput(f"--trend needs matplotlib ({error})") from None
    labels, series = trend_series(history, candidate)
    columns = min(3, len(series))
    rows = math.ceil(len(series) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3 * rows), squeeze=False)
    metric = settings.resolved_metric
    scale, unit = (1e3, "ms") if metric.name == TIME_METRIC else (1.0, metric.unit)
    positions = list(range(len(labels)))
    for axis, (name, medians) in zip(axes.flat, series.items()):
        known = [(x, value * scale) for x, value in zip(positions, medians) if value is not None]
        axis.plot([x for x, _ in known], [y for _, y in known], marker="o", color="tab:blue")
        if medians[-1] is not None:
            axis.plot([positions[-1]], [medians[-1] * scale], marker="o", color="tab:red", label="candidate")
        axis.set_title(name, fontsize=7)
        axis.set_ylabel(f"median {unit}")
        axis.set_xticks(positions, labels, rotation=45, fontsize=7)
    for axis in list(axes.flat)[len(series):]:
        axis.set_visible(False)
    figure.suptitle(f"median {settings.metric} per commit, oldest first; the last {settings.window_size} "
                    f"commits are the gate's window")
    figure.tight_layout()
    try:
        figure.savefig(path)
    except OSError as error:
        raise UnusableInput(f"--trend {path}: cannot write: {error}") from None
    finally:
        plt.close(figure)


# Rendering.

def format_metric(value: float | None, metric: str, unit: str = "") -> str:
    if value is None:
        return "-"
    if metric == "items_per_second":
        return f"{value:,.1f}/s"
    if metric != TIME_METRIC:
        return f"{value:,.4g} {unit}".rstrip()
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3f} {unit}"
    return f"{value / 1e-9:.3f} ns"


def verdict_text(row: Row) -> str:
    return row.verdict + (f" (threshold only, <{MIN_REPETITIONS_FOR_U_TEST} reps)" if row.threshold_only else "")


def table_cells(report: Report) -> list:
    metric, unit = report.settings.metric, report.settings.resolved_metric.unit if report.settings.resolved_metric else ""
    return [[row.name,
             f"{row.baseline_repetitions}/{row.candidate_repetitions}",
             format_metric(row.baseline_median, metric, unit),
             format_metric(row.candidate_median, metric, unit),
             "-" if row.change_pct is None else f"{row.change_pct:+.1f}%",
             "-" if row.p_value is None else f"{row.p_value:.4f}",
             "-" if row.p_adjusted is None else f"{row.p_adjusted:.4f}",
             verdict_text(row),
             row.decided_by or "-"] for row in report.rows]


TABLE_HEADER = ["benchmark", "reps b/c", "baseline median", "candidate median", "change", "p-value", "adjusted p",
                "verdict", "decided by"]


def decision_rule(settings: argparse.Namespace) -> str:
    metric = settings.resolved_metric
    if metric is None:  # the runs could not be read: their counter table neither
        measure = f"median {settings.metric}"
    elif metric.name == TIME_METRIC:
        measure = "median real_time, lower is better"
    else:
        measure = f"median {metric.name}, {'higher' if metric.higher_is_better else 'lower'} is better"
    correction = ("Holm's step-down correction over every benchmark tested and the stratified test of a shift "
                  "common to them" if settings.correction == "holm"
                  else "no correction for testing many benchmarks (--correction=none)")
    return (f"metric {settings.metric} ({measure}); regression: worse by more than {settings.threshold:g}% "
            f"and two-sided Mann-Whitney U p < {settings.alpha:g} (exact up to "
            f"{rank_tests.EXACT_MAX_REPETITIONS} repetitions) after {correction}; a slowdown that could not "
            "have been significant is underpowered (exit 2)")


def describe_run(report: Report, side: str) -> str:
    path = getattr(report.settings, side)
    context = report.baseline_context if side == "baseline" else report.candidate_context
    if side == "baseline" and report.window:
        commits = list(dict.fromkeys(str(run["git_sha"])[:12] for run in report.window))
        return f"{path} (window: {len(report.window)} runs of the commits {', '.join(commits)}, oldest first)"
    if not context:
        return path
    return f"{path} (git {str(context.get('git_sha', '?'))[:12]}, {context.get('date', '?')})"


def notes(report: Report) -> list:
    """Lines under the verdict: why unusable, warnings, unmatched benchmarks, errored repetitions."""
    lines = [f"unusable: {reason}" for reason in report.unusable]
    lines += [f"underpowered: {reason}" for reason in report.underpowered_reasons()]
    lines += [f"warning: {warning}" for warning in report.warnings]
    lost_effect = "reported only (--allow-missing)" if report.settings.allow_missing else "fails the gate"
    for row in report.rows:
        if row.verdict in LOST_VERDICTS:
            why = f": {row.candidate_error}" if row.candidate_error else ""
            lines.append(f"{row.verdict}: {row.name}{why} ({lost_effect})")
        elif row.verdict in {ONLY_IN_BASELINE, ONLY_IN_CANDIDATE, ERROR_IN_BASELINE}:
            lines.append(f"{row.verdict}: {row.name} (does not fail)")
    lines += [f"errored: {error}" for error in report.errors]
    if report.common:
        row = report.common
        lines.append(f"{row.name}: {row.verdict} (median change {row.change_pct:+.1f}%, stratified U p "
                     f"{row.p_value:.4g} ({row.test}), adjusted {row.p_adjusted:.4g}; {row.decided_by})")
    return lines


def render_text(report: Report) -> str:
    lines = [f"perf-gate: {report.outcome.upper()} (exit {report.exit_code})",
             f"baseline:  {describe_run(report, 'baseline')}",
             f"candidate: {describe_run(report, 'candidate')}",
             decision_rule(report.settings)]
    lines += notes(report)
    if report.rows:
        cells = [TABLE_HEADER] + table_cells(report)
        widths = [max(len(row[column]) for row in cells) for column in range(len(TABLE_HEADER))]
        lines.append("")
        for row in cells:
            lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return "\n".join(lines) + "\n"


def markdown_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(report: Report) -> str:
    lines = [f"### parbench perf gate: {report.outcome.upper()} (exit {report.exit_code})", "",
             f"- baseline: `{describe_run(report, 'baseline')}`",
             f"- candidate: `{describe_run(report, 'candidate')}`",
             f"- {decision_rule(report.settings)}"]
    lines += [f"- {markdown_escape(note)}" for note in notes(report)]
    if report.rows:
        lines += ["", "| " + " | ".join(TABLE_HEADER) + " |", "|" + "---|" * len(TABLE_HEADER)]
        for cells in table_cells(report):
            cells[0] = f"`{cells[0]}`"
            lines.append("| " + " | ".join(markdown_escape(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n\n"


def render_json(report: Report) -> dict:
    settings = report.settings
    return {
        "outcome": report.outcome,
        "exit_code": report.exit_code,
        "baseline": settings.baseline,
        "candidate": settings.candidate,
        "metric": settings.metric,
        "metric_unit": settings.resolved_metric.unit if settings.resolved_metric else None,
        "threshold_pct": settings.threshold,
        "alpha": settings.alpha,
        "correction": settings.correction,
        "window": report.window,
        "too_few_repetitions": settings.too_few_repetitions,
        "min_repetitions_for_u_test": MIN_REPETITIONS_FOR_U_TEST,
        "exact_max_repetitions": rank_tests.EXACT_MAX_REPETITIONS,
        "allow_missing": settings.allow_missing,
        "unusable": report.unusable,
        "underpowered": report.underpowered_reasons(),
        "warnings": report.warnings,
        "errors": report.errors,
        "benchmarks": [asdict(row) for row in report.rows],
        "common": asdict(report.common) if report.common else None,
    }


# Command line.

def positive_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def percentage(text: str) -> float:
    value = float_option(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return value


def probability(text: str) -> float:
    value = float_option(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {text}")
    return value


def float_option(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def parse_arguments(argv: list | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="perf-gate",
        description="Compare a candidate parbench (Google Benchmark) JSON run against a baseline and fail "
                    "on performance regressions. See docs/PERF_GATE.md.",
        epilog="exit codes: 0 pass, 1 regression, or a benchmark the baseline measured is missing or failed "
               "in the candidate (unless --allow-missing), "
               "2 unusable input (unreadable, oversized, not a regular file or malformed, a repetition without an "
               "integer index or given twice, unknown schema major, context mismatch, "
               "too few repetitions with --too-few-repetitions=fail, throttled or stalled repetitions with "
               "--refuse-throttled or --refuse-stalled, nothing in common, nothing compared, an unusable --window "
               "folder or --trend figure, bad option) or underpowered (no regression found, and a slowdown beyond "
               "the threshold, or every test, could not have been significant at these repetitions)")
    parser.add_argument("runs", nargs="+", metavar="[BASELINE] CANDIDATE",
                        help="baseline JSON, from a trusted run on the same GPUs (left out with --window), "
                             "then the candidate JSON, from the build under test")
    parser.add_argument("--metric", default=TIME_METRIC,
                        help="what to compare: time, real_time (lower is better), or any counter the runs' context "
                             "declares with a direction (docs/JSON.md, `counters`), e.g. items_per_second (higher "
                             "is better), step_ms, mfu, peak_mem_gib_dev0; default %(default)s")
    parser.add_argument("--threshold", type=percentage, default=5.0, metavar="PCT",
                        help="a median worse by more than PCT percent can regress; default %(default)g")
    parser.add_argument("--alpha", type=probability, default=0.05,
                        help="significance level of the two-sided Mann-Whitney U test; default %(default)g")
    parser.add_argument("--too-few-repetitions", choices=["threshold", "fail"], default="threshold",
                        help=f"with fewer than {MIN_REPETITIONS_FOR_U_TEST} repetitions a side: judge by the threshold "
                             "alone (threshold) or declare the input unusable, exit 2 (fail); default %(default)s")
    parser.add_argument("--allow-missing", action="store_true",
                        help="report a benchmark the baseline measured but the candidate did not (missing, failed "
                             "or skipped) without failing; by default it fails the gate (exit 1)")
    parser.add_argument("--allow-context-mismatch", action="store_true",
                        help=f"compare even when {', '.join(CONTEXT_KEYS_THAT_MUST_MATCH)} differ, or on runs "
                             f"without GPUs {', '.join(CPU_CONTEXT_KEYS_THAT_MUST_MATCH + CPU_THREAD_KEYS)} "
                             "(reported as warnings)")
    parser.add_argument("--refuse-throttled", action="store_true",
                        help="declare a candidate with any repetition flagged throttled (parbench's `throttled` "
                             "counter: a GPU clock-event reason or a low SM clock) unusable, exit 2")
    parser.add_argument("--refuse-stalled", action="store_true",
                        help="declare a candidate with any repetition flagged stalled (parbench's `stalled` "
                             "counter: its slowest iteration at least 3 times its median one) unusable, exit 2")
    parser.add_argument("--correction", choices=["holm", "none"], default="holm",
                        help="how the p-values are corrected for testing every benchmark of the run, and the "
                             "shift common to them, at once: Holm's step-down method, which keeps the chance of any "
                             "false regression below alpha (holm), or not at all (none); default %(default)s")
    parser.add_argument("--window", metavar="DIR",
                        help="judge against earlier baselines instead of one: the JSON runs in DIR of the candidate's "
                             "GPUs and software (context gpu_names, gpu_count, libtorch_version, cuda_version; on runs "
                             "without GPUs also the CPU model, core count and threads) and "
                             "other commits (context git_sha), the last --window-size commits' repetitions pooled")
    parser.add_argument("--window-size", type=positive_count, default=5, metavar="N",
                        help="commits in the --window; default %(default)s")
    parser.add_argument("--trend", metavar="FIGURE",
                        help="with --window: draw each benchmark's median over the folder's commits and the "
                             "candidate to FIGURE (.png, .pdf, .svg; needs matplotlib)")
    parser.add_argument("--json-out", metavar="FILE", help="write the comparison as JSON to FILE")
    parser.add_argument("--markdown-out", metavar="FILE",
                        help="append the comparison as Markdown to FILE, e.g. \"$GITHUB_STEP_SUMMARY\"")
    settings = parser.parse_args(argv)
    # time and items_per_second read the same in every file; another counter's facts come with the runs.
    settings.resolved_metric = resolve_metric(settings.metric, []) if settings.metric in (TIME_METRIC, "items_per_second") \
        else None
    if settings.window:
        if len(settings.runs) != 1:
            parser.error(f"with --window give the candidate alone, got {len(settings.runs)} files")
        settings.baseline, settings.candidate = settings.window, settings.runs[0]
    else:
        if len(settings.runs) != 2:
            parser.error(f"give a baseline and a candidate (or --window DIR and a candidate), got {len(settings.runs)} files")
        if settings.trend:
            parser.error("--trend draws the history of a --window folder: give --window DIR")
        settings.baseline, settings.candidate = settings.runs
    return settings


def run_gate(settings: argparse.Namespace) -> Report:
    history = None
    try:
        if settings.window:
            candidate = load_run(settings.candidate, settings.metric)
            history = load_history(settings.window, candidate, settings)
            baseline = history.baseline
        else:
            baseline = load_run(settings.baseline, settings.metric)
            candidate = load_run(settings.candidate, settings.metric)
    except UnusableInput as problem:
        return Report(settings=settings, unusable=[str(problem)])
    contexts = [candidate.context] + ([run.context for _, runs in history.commits for run in runs] if history
                                      else [baseline.context])
    try:
        settings.resolved_metric = resolve_metric(settings.metric, contexts)
    except UnusableInput as problem:
        return Report(settings=settings, unusable=[str(problem)])
    report = compare(baseline, candidate, settings)
    if history:
        report.window = history.window
        if settings.trend:
            try:
                draw_trend(settings.trend, history, candidate, settings)
            except UnusableInput as problem:
                report.unusable.append(str(problem))
    return report


def write_outputs(report: Report, settings: argparse.Namespace) -> None:
    if settings.json_out:
        with open(settings.json_out, "w", encoding="utf-8") as file:
            json.dump(render_json(report), file, indent=2)
            file.write("\n")
    if settings.markdown_out:
        with open(settings.markdown_out, "a", encoding="utf-8") as file:
            file.write(render_markdown(report))


def main(argv: list | None = None) -> int:
    settings = parse_arguments(argv)
    try:
        report = run_gate(settings)
        sys.stdout.write(render_text(report))
        write_outputs(report, settings)
        return report.exit_code
    except UnknownMetric as error:  # a bad option: one line naming the allowed metrics
        print(f"perf-gate: {error}", file=sys.stderr)
        return EXIT_UNUSABLE
    except Exception as error:  # a crash must not exit 1, which reads as "regression"; one line, no traceback
        message = str(error).splitlines()[0] if str(error) else ""
        print(f"perf-gate: internal error, input unusable: {type(error).__name__}"
              f"{': ' + message if message else ''}", file=sys.stderr)
        if os.environ.get("PERF_GATE_TRACEBACK"):
            traceback.print_exc()
        return EXIT_UNUSABLE


if __name__ == "__main__":  # python -m parbench_results.perf_gate
    sys.exit(main())
