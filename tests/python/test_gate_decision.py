"""The gate's decision at the repetitions parbench runs by default (docs/PERF_GATE.md, "How it
decides"): the exact U test, the stratified test of a common shift, what is underpowered, and
the false-alarm rate of unchanged runs."""
import itertools
import math
import random

import pytest
import scipy.stats

from parbench_results import rank_tests
from test_perf_gate import SINGLE, benchmark_json, gate, gate_report, verdicts

SIXTEEN = [f"{SINGLE}/case:{i}" for i in range(16)]


def sixteen_cases(seed, repetitions=5, noise=0.01, slowdown_of=lambda index: 1.0):
    """16 cases at `repetitions` a side, each a different median, `noise` relative spread."""
    generator = random.Random(seed)
    baseline, candidate = {}, {}
    for index, name in enumerate(SIXTEEN):
        median = 50.0 + 10 * index
        baseline[name] = [median * (1 + generator.gauss(0, noise)) for _ in range(repetitions)]
        candidate[name] = [median * slowdown_of(index) * (1 + generator.gauss(0, noise)) for _ in range(repetitions)]
    return baseline, candidate


# 16 cases at 5 repetitions a side, the default preset's.

def test_a_uniform_2x_slowdown_over_16_cases_at_5_repetitions_fails(tmp_path, capsys):
    baseline, candidate = sixteen_cases(seed=1, slowdown_of=lambda index: 2.0)
    code, report = gate_report(tmp_path, benchmark_json(baseline), benchmark_json(candidate))
    assert code == 1
    assert report["outcome"] == "regression"
    common = report["common"]
    assert common["verdict"] == "REGRESSION"
    assert common["test"] == "exact"
    assert common["p_value"] == pytest.approx(2 / math.comb(10, 5) ** 16)
    assert common["change_pct"] == pytest.approx(100, abs=5)
    # No single case could be significant among 17 tests at 5 repetitions: each says so.
    assert set(verdicts(report).values()) == {"slower, underpowered"}
    out = capsys.readouterr().out
    assert "common shift of the 16 benchmarks tested: REGRESSION" in out


def test_one_case_2x_slower_over_16_cases_at_5_repetitions_does_not_pass(tmp_path, capsys):
    baseline, candidate = sixteen_cases(seed=2, slowdown_of=lambda index: 2.0 if index == 7 else 1.0)
    code, report = gate_report(tmp_path, benchmark_json(baseline), benchmark_json(candidate))
    assert code in (1, 2)
    assert code == 2 and report["outcome"] == "underpowered"
    assert verdicts(report)[SIXTEEN[7]] == "slower, underpowered"
    [reason] = report["underpowered"]
    assert reason.startswith(f"{SIXTEEN[7]}: worse by 100.") and "5/5 repetitions" in reason
    assert "UNDERPOWERED (exit 2)" in capsys.readouterr().out


def test_one_case_2x_slower_over_16_cases_at_7_repetitions_is_a_regression(tmp_path):
    # At 7 a side a single case's exact p (2 / comb(14, 7)) clears Holm's 17 tests.
    baseline, candidate = sixteen_cases(seed=3, repetitions=7, slowdown_of=lambda index: 2.0 if index == 7 else 1.0)
    code, report = gate_report(tmp_path, benchmark_json(baseline), benchmark_json(candidate))
    assert code == 1
    assert [name for name, verdict in verdicts(report).items() if verdict == "REGRESSION"] == [SIXTEEN[7]]


@pytest.mark.parametrize("threshold", ["0", "5"])
def test_unchanged_runs_do_not_fail_more_often_than_alpha(tmp_path, threshold):
    # 60 comparisons of runs drawn from one distribution, 16 cases at 5 repetitions, 3% noise.
    # With --threshold 0 the tests alone decide; Holm's correction over the 17 tests keeps the
    # chance of any false regression in a comparison below alpha = 0.05, so at most 3 of 60.
    trials = 60
    failures = sum(gate(tmp_path, *map(benchmark_json, sixteen_cases(seed=1000 + trial, noise=0.03)),
                        "--threshold", threshold) == 1 for trial in range(trials))
    assert failures <= 0.05 * trials


def test_uncorrected_tests_of_unchanged_runs_do_fail_more_often_than_alpha(tmp_path):
    # The check above can fail: without the correction 16 tests at alpha = 0.05 reject by chance
    # in far more than 5% of the comparisons.
    trials = 60
    failures = sum(gate(tmp_path, *map(benchmark_json, sixteen_cases(seed=1000 + trial, noise=0.03)),
                        "--threshold", "0", "--correction", "none") == 1 for trial in range(trials))
    assert failures > 0.05 * trials


# Underpowered.

def test_a_family_that_cannot_reach_alpha_is_underpowered_even_unchanged(tmp_path, capsys):
    # One case at 5 a side: the smallest two-sided exact p is 2 / 252 = 0.0079.
    run = benchmark_json({SINGLE: [100.0, 101.0, 99.0, 102.0, 98.0]})
    code, report = gate_report(tmp_path, run, run, "--alpha", "0.005")
    assert code == 2 and report["outcome"] == "underpowered"
    [reason] = report["underpowered"]
    assert reason.startswith("no test could reach significance: the smallest p-value these repetitions allow is "
                             "0.007937")
    assert "underpowered: no test could reach significance" in capsys.readouterr().out
    assert gate(tmp_path, run, run, "--alpha", "0.01") == 0


def test_a_slowdown_that_can_be_significant_but_is_not_passes(tmp_path):
    baseline = {SINGLE: [80, 90, 100, 110, 120, 130, 140]}
    candidate = {SINGLE: [85, 96, 100, 117, 125, 135, 145]}
    code, report = gate_report(tmp_path, benchmark_json(baseline), benchmark_json(candidate))
    assert code == 0
    [row] = report["benchmarks"]
    assert row["verdict"] == "slower, not significant"
    assert row["p_min"] == pytest.approx(2 / math.comb(14, 7)) and row["p_min_adjusted"] < 0.05


def test_an_underpowered_improvement_passes(tmp_path):
    baseline, candidate = sixteen_cases(seed=4, slowdown_of=lambda index: 0.5 if index == 3 else 1.0)
    code, report = gate_report(tmp_path, benchmark_json(baseline), benchmark_json(candidate))
    assert code == 0
    assert verdicts(report)[SIXTEEN[3]] == "faster, not significant"


# The condition for the U test: the smaller side's repetitions.

@pytest.mark.parametrize("sizes", [(10, 3), (3, 10)])
def test_the_u_test_needs_5_repetitions_on_the_smaller_side(tmp_path, sizes):
    n_baseline, n_candidate = sizes
    baseline = {SINGLE: [100.0 + i for i in range(n_baseline)]}
    candidate = {SINGLE: [130.0 + i for i in range(n_candidate)]}
    code, report = gate_report(tmp_path, benchmark_json(baseline), benchmark_json(candidate))
    [row] = report["benchmarks"]
    assert row["threshold_only"] and row["p_value"] is None and row["test"] is None
    assert row["verdict"] == "REGRESSION" and code == 1
    code, report = gate_report(tmp_path, benchmark_json(baseline), benchmark_json(candidate),
                               "--too-few-repetitions=fail")
    assert code == 2 and verdicts(report) == {SINGLE: "too few repetitions"}


# The exact U test.

def brute_force_p(x, y):
    """Every assignment of the pooled values' ranks to the candidate, counted."""
    ranks = rank_tests.doubled_midranks(list(x) + list(y))
    n_y, centre = len(y), len(x) * len(y)
    observed = abs(sum(ranks[len(x):]) - n_y * (n_y + 1) - centre)
    at_least = total = 0
    for chosen in itertools.combinations(ranks, n_y):
        total += 1
        at_least += abs(sum(chosen) - n_y * (n_y + 1) - centre) >= observed
    return at_least / total


def samples(seed, n_x, n_y, shift=0.7, grid=None):
    generator = random.Random(seed)
    x = [generator.gauss(0, 1) for _ in range(n_x)]
    y = [generator.gauss(shift, 1) for _ in range(n_y)]
    if grid:  # timings at a clock's resolution: ties
        x, y = [round(v * grid) / grid for v in x], [round(v * grid) / grid for v in y]
    return x, y


@pytest.mark.parametrize("n_x, n_y", [(5, 5), (3, 12), (10, 10), (7, 4), (1, 6), (25, 25), (50, 50)])
def test_exact_u_test_without_ties_matches_scipy_exact(n_x, n_y):
    for seed in range(3):
        x, y = samples(seed, n_x, n_y)
        test = rank_tests.u_test(x, y)
        assert test.method == "exact"
        expected = scipy.stats.mannwhitneyu(x, y, alternative="two-sided", method="exact").pvalue
        assert test.p_value == pytest.approx(expected, rel=1e-9, abs=1e-15)
        assert rank_tests.u_test(y, x).p_value == pytest.approx(test.p_value, rel=1e-12)
        assert test.min_p_value == pytest.approx(2 / math.comb(n_x + n_y, n_y))


@pytest.mark.parametrize("n_x, n_y, grid", [(5, 5, 2), (4, 7, 3), (6, 6, 1), (8, 5, 4), (3, 3, 1)])
def test_exact_u_test_with_ties_counts_every_arrangement(n_x, n_y, grid):
    for seed in range(4):
        x, y = samples(seed, n_x, n_y, grid=grid)
        assert len(set(x + y)) < n_x + n_y, "the example needs ties"
        test = rank_tests.u_test(x, y)
        assert test.method == "exact"
        assert test.p_value == pytest.approx(brute_force_p(x, y), rel=1e-12)
        assert sum(test.counts) == test.total == math.comb(n_x + n_y, n_y)


def test_exact_u_test_of_all_tied_values_is_one():
    test = rank_tests.u_test([3.0] * 5, [3.0] * 5)
    assert test.p_value == 1.0 and test.min_p_value == 1.0


def test_large_samples_use_the_normal_approximation():
    x, y = samples(5, 60, 50, shift=0.3)
    test = rank_tests.u_test(x, y)
    assert test.method == "asymptotic"
    expected = scipy.stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic").pvalue
    assert test.p_value == pytest.approx(expected, rel=1e-9)
    x, y = samples(6, 60, 50, shift=0.3, grid=2)
    expected = scipy.stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic").pvalue
    assert rank_tests.u_test(x, y).p_value == pytest.approx(expected, rel=1e-9)


# The stratified test.

def brute_force_stratified(strata):
    """Every combination of each stratum's assignments of its ranks, each benchmark weighted as
    the gate weighs it: the two-sided p-value, and the smallest any combination gives."""
    scale = math.lcm(*(len(x) * len(y) for x, y in strata))
    per_stratum = []
    observed = 0
    for x, y in strata:
        ranks = rank_tests.doubled_midranks(list(x) + list(y))
        n_y, weight = len(y), scale // (len(x) * len(y))
        observed += weight * (sum(ranks[len(x):]) - n_y * (n_y + 1))
        per_stratum.append([weight * (sum(chosen) - n_y * (n_y + 1)) for chosen in itertools.combinations(ranks, n_y)])
    centre = scale * len(strata)
    distances = [abs(sum(combination) - centre) for combination in itertools.product(*per_stratum)]
    largest = max(distances)
    return (sum(d >= abs(observed - centre) for d in distances) / len(distances),
            sum(d == largest for d in distances) / len(distances))


def brute_force_stratified_p(strata):
    return brute_force_stratified(strata)[0]


@pytest.mark.parametrize("sizes, grid", [([(3, 3), (3, 3)], None), ([(2, 3), (4, 3), (3, 2)], None),
                                         ([(4, 4), (3, 5)], 2), ([(4, 4), (4, 4), (3, 3)], 1)])
def test_stratified_test_matches_brute_force(sizes, grid):
    for seed in range(2):
        strata = [samples(seed * 10 + index, n_x, n_y, shift=0.5, grid=grid) for index, (n_x, n_y) in enumerate(sizes)]
        test = rank_tests.stratified_u_test([rank_tests.u_test(x, y) for x, y in strata])
        assert test.method == "exact"
        assert test.p_value == pytest.approx(brute_force_stratified_p(strata), rel=1e-12)


def test_stratified_normal_approximation_is_close_to_the_exact_test():
    tests = [rank_tests.u_test(*samples(seed, 8, 8, shift=0.25)) for seed in range(16)]
    exact, approximate = rank_tests.stratified_u_test(tests), rank_tests.stratified_u_test(tests, exact_max_bits=0)
    assert exact.method == "exact" and approximate.method == "asymptotic"
    assert approximate.p_value == pytest.approx(exact.p_value, rel=0.02)


def test_stratified_test_of_one_benchmark_is_its_u_test():
    x, y = samples(7, 6, 6)
    assert rank_tests.stratified_u_test([rank_tests.u_test(x, y)]).p_value == pytest.approx(
        rank_tests.u_test(x, y).p_value, rel=1e-12)


@pytest.mark.parametrize("sizes, grid", [([(3, 3), (3, 3)], None), ([(2, 3), (4, 3)], 1), ([(4, 4), (3, 5)], 2)])
def test_stratified_smallest_p_value_is_that_of_the_most_extreme_arrangement(sizes, grid):
    strata = [samples(index, n_x, n_y, shift=0.5, grid=grid) for index, (n_x, n_y) in enumerate(sizes)]
    tests = [rank_tests.u_test(x, y) for x, y in strata]
    expected = brute_force_stratified(strata)[1]
    assert rank_tests.stratified_u_test(tests).min_p_value == pytest.approx(expected, rel=1e-12)
    assert rank_tests.stratified_u_test(tests, min_p_only=True).min_p_value == pytest.approx(expected, rel=1e-12)
    assert rank_tests.design_stratified_min_p_value(sizes) == pytest.approx(
        2 / math.prod(math.comb(n_x + n_y, n_y) for n_x, n_y in sizes))
