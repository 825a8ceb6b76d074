"""Tests of ci/perf-gate over many benchmarks and over history (docs/PERF_GATE.md): Holm's
correction, the --window of earlier baselines and the --trend figure."""
import json
import os

import pytest
import scipy.stats

from test_perf_gate import BASELINE_SAMPLES, CONTEXT, SINGLE, benchmark_json, noisy, perf_gate, scaled, verdicts


def holm_by_hand(p_values, alpha):
    """Holm's procedure as the textbook states it: reject the smallest p-values while
    p_(i) < alpha / (m - i + 1), stopping at the first that is not."""
    order = sorted(range(len(p_values)), key=lambda index: p_values[index])
    rejected = set()
    for position, index in enumerate(order):
        if p_values[index] >= alpha / (len(p_values) - position):
            break
        rejected.add(index)
    return rejected


def test_holm_matches_a_hand_worked_example():
    # m = 4, sorted: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04, raised to 0.06.
    p_values = [0.01, 0.04, 0.03, 0.005]
    assert perf_gate.holm_adjusted(p_values) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # At alpha = 0.05 the two smallest are rejected and the step-down stops at 0.03 (0.03 >= 0.05 / 2),
    # so 0.04 is kept although 0.04 < 0.05 / 1.
    assert {i for i, p in enumerate(perf_gate.holm_adjusted(p_values)) if p < 0.05} == {0, 3}
    assert holm_by_hand(p_values, 0.05) == {0, 3}
    assert perf_gate.holm_adjusted([]) == []
    assert perf_gate.holm_adjusted([0.7, 0.9]) == [1.0, 1.0]


def many_cases(count, slowdown_of, seed=0):
    """`count` cases on each side, 10 repetitions, 3% noise; case i of the candidate slowed by slowdown_of(i)."""
    names = [f"{SINGLE}/case:{i}" for i in range(count)]
    baseline = {name: noisy(100.0, noise=0.03, seed=seed + i) for i, name in enumerate(names)}
    candidate = {name: [t * slowdown_of(i) for t in noisy(100.0, noise=0.03, seed=seed + 1000 + i)]
                 for i, name in enumerate(names)}
    return names, baseline, candidate


def report_of(tmp_path, baseline, candidate, *options):
    paths = []
    for filename, document in (("baseline.json", baseline), ("candidate.json", candidate)):
        (tmp_path / filename).write_text(json.dumps(document))
        paths.append(str(tmp_path / filename))
    code = perf_gate.main([*paths, "--json-out", str(tmp_path / "report.json"), *options])
    return code, json.loads((tmp_path / "report.json").read_text())


def test_holm_over_a_run_agrees_with_scipy_and_the_hand_procedure(tmp_path):
    names, baseline, candidate = many_cases(12, lambda i: 1.06 + 0.005 * i)
    code, report = report_of(tmp_path, benchmark_json(baseline), benchmark_json(candidate))
    # 10 repetitions a side without ties: the exact U test.
    p_values = [scipy.stats.mannwhitneyu(baseline[n], candidate[n], method="exact").pvalue for n in names]
    rows = {row["name"]: row for row in report["benchmarks"]}
    assert [rows[n]["p_value"] for n in names] == pytest.approx(p_values, rel=1e-9)
    assert {rows[n]["test"] for n in names} == {"exact"}
    # The family: the 12 benchmarks and the common shift's stratified test.
    common = report["common"]
    assert common["kind"] == "common" and common["name"] == "common shift of the 12 benchmarks tested"
    family = p_values + [common["p_value"]]
    assert [rows[n]["p_adjusted"] for n in names] + [common["p_adjusted"]] == \
        pytest.approx(perf_gate.holm_adjusted(family), rel=1e-9)
    rejected = holm_by_hand(family, 0.05)
    assert (len(names) in rejected) == (common["verdict"] == "REGRESSION")
    for index, name in enumerate(names):
        assert rows[name]["verdict"] == ("REGRESSION" if index in rejected else "slower, not significant"), name
        assert rows[name]["decided_by"].startswith("Holm-adjusted p")
    assert report["correction"] == "holm"
    assert code == (1 if rejected else 0)


def test_thirty_unchanged_cases_do_not_regress_by_chance_and_one_slowdown_still_does(tmp_path, capsys):
    # Each case slower by 6% with a p-value near 0.03: uncorrected, many "regress"; Holm keeps them.
    names, baseline, candidate = many_cases(30, lambda i: 1.0)
    for name in names:
        candidate[name] = [t * 1.06 for t in baseline[name]][:5] + candidate[name][5:]
    code_none, uncorrected = report_of(tmp_path, benchmark_json(baseline), benchmark_json(candidate),
                                       "--correction", "none")
    code_holm, corrected = report_of(tmp_path, benchmark_json(baseline), benchmark_json(candidate))
    flagged = [row for row in uncorrected["benchmarks"] if row["verdict"] == "REGRESSION"]
    assert code_none == 1 and flagged, "the example needs chance regressions without a correction"
    assert all(row["decided_by"].startswith("p ") for row in flagged)
    assert code_holm == 0, [row for row in corrected["benchmarks"] if row["verdict"] == "REGRESSION"]
    assert "after Holm's step-down correction" in capsys.readouterr().out

    candidate[names[7]] = [t * 1.3 for t in baseline[names[7]]]
    code, report = report_of(tmp_path, benchmark_json(baseline), benchmark_json(candidate))
    assert code == 1
    assert [n for n, v in verdicts(report).items() if v == "REGRESSION"] == [names[7]]


def test_the_threshold_decides_first_and_says_so(tmp_path):
    code, report = report_of(tmp_path, benchmark_json(BASELINE_SAMPLES), benchmark_json(scaled(BASELINE_SAMPLES, 1.03)))
    assert code == 0
    assert {row["decided_by"] for row in report["benchmarks"]} == {"threshold: within 5%"}


# The window of earlier baselines.

def history_run(sha, day, samples, gpu_names=None):
    context = {"git_sha": sha * 5, "date": f"2025-06-{day:02d}T12:00:00+00:00"}
    if gpu_names:
        context["gpu_names"] = gpu_names
    return benchmark_json(samples, context=context)


def write_history(folder, runs):
    folder.mkdir(exist_ok=True)
    for index, run in enumerate(runs):
        (folder / f"{index:02d}-{run['context']['git_sha'][:8]}.json").write_text(json.dumps(run))
    return str(folder)


TYPICAL = {SINGLE: noisy(250.0, seed=1)}
LUCKY = {SINGLE: [t * 0.9 for t in TYPICAL[SINGLE]]}  # one baseline run 10% faster than the machine usually is


def window_gate(tmp_path, folder, candidate, *options):
    (tmp_path / "candidate.json").write_text(json.dumps(candidate))
    report_path = tmp_path / "window-report.json"
    code = perf_gate.main(["--window", folder, str(tmp_path / "candidate.json"), "--json-out", str(report_path),
                           *options])
    return code, json.loads(report_path.read_text())


def test_a_window_outvotes_one_lucky_baseline(tmp_path):
    runs = [history_run("a1b2c3d4", 1, {SINGLE: noisy(250.0, seed=21)}),
            history_run("b2c3d4e5", 2, {SINGLE: noisy(250.0, seed=22)}),
            history_run("c3d4e5f6", 3, {SINGLE: noisy(250.0, seed=23)}),
            history_run("d4e5f6a7", 4, LUCKY)]
    folder = write_history(tmp_path / "history", runs)
    candidate = history_run("e5f6a7b8", 5, {SINGLE: noisy(250.0, seed=24)})
    # Against the lucky run alone the candidate "regresses" by 10%.
    code, _ = report_of(tmp_path, runs[-1], candidate)
    assert code == 1
    code, report = window_gate(tmp_path, folder, candidate, "--window-size", "4")
    assert code == 0, report
    assert [run["git_sha"][:8] for run in report["window"]] == ["a1b2c3d4", "b2c3d4e5", "c3d4e5f6", "d4e5f6a7"]
    [row] = report["benchmarks"]
    assert row["baseline_repetitions"] == 40


def test_the_window_keeps_the_last_commits_of_the_candidates_gpus_and_not_its_own_commit(tmp_path, capsys):
    other_gpus = "NVIDIA A100-SXM4-80GB;NVIDIA A100-SXM4-80GB"
    runs = [history_run("a1b2c3d4", 1, TYPICAL),
            history_run("b2c3d4e5", 3, TYPICAL),
            history_run("b2c3d4e5", 4, TYPICAL),  # the same commit run twice: both pooled
            history_run("c3d4e5f6", 5, TYPICAL, gpu_names=other_gpus),
            history_run("d4e5f6a7", 2, TYPICAL),  # dated between the others: ordered by date, not by file
            history_run("e5f6a7b8", 6, TYPICAL)]  # the candidate's own commit
    folder = write_history(tmp_path / "history", runs)
    candidate = history_run("e5f6a7b8", 7, TYPICAL)
    code, report = window_gate(tmp_path, folder, candidate, "--window-size", "2")
    assert code == 0
    assert [(run["git_sha"][:8], run["date"][:10]) for run in report["window"]] == [
        ("d4e5f6a7", "2025-06-02"), ("b2c3d4e5", "2025-06-03"), ("b2c3d4e5", "2025-06-04")]
    assert "(window: 3 runs of the commits d4e5f6a7d4e5, b2c3d4e5b2c3, oldest first)" in capsys.readouterr().out


@pytest.mark.parametrize("setup, message", [
    (lambda folder: folder.mkdir(), "none of its 0 runs is of another commit"),
    (lambda folder: None, "cannot list"),
    (lambda folder: (folder.mkdir(), (folder / "bad.json").write_text("{")), "bad.json: not valid JSON"),
    (lambda folder: (folder.mkdir(), (folder / "other.json").write_text(json.dumps(
        history_run("a1b2c3d4", 1, TYPICAL, gpu_names="NVIDIA A100")))), "none of its 1 runs is of another commit"),
])
def test_an_unusable_window_exits_2_naming_why(tmp_path, capsys, setup, message):
    folder = tmp_path / "history"
    setup(folder)
    (tmp_path / "candidate.json").write_text(json.dumps(history_run("e5f6a7b8", 7, TYPICAL)))
    assert perf_gate.main(["--window", str(folder), str(tmp_path / "candidate.json")]) == 2
    assert message in capsys.readouterr().out


@pytest.mark.parametrize("arguments", [
    ["--window", "DIR", "a.json", "b.json"], ["a.json"], ["a.json", "b.json", "--trend", "t.png"],
    ["--window", "DIR", "a.json", "--window-size", "0"], ["--window", "DIR", "a.json", "--correction", "bonferroni"],
])
def test_bad_window_arguments_exit_2(arguments):
    with pytest.raises(SystemExit) as exit_info:
        perf_gate.main(arguments)
    assert exit_info.value.code == 2


# The trend figure.

def test_the_trend_has_each_benchmarks_median_per_commit_and_is_drawn(tmp_path):
    other = f"{SINGLE}/other"
    runs = [history_run("a1b2c3d4", 1, {SINGLE: [100.0] * 5}),
            history_run("b2c3d4e5", 2, {SINGLE: [110.0] * 5, other: [50.0] * 5}),
            history_run("b2c3d4e5", 3, {SINGLE: [120.0] * 5}),
            history_run("c3d4e5f6", 4, {SINGLE: [105.0] * 5, other: [55.0] * 5})]
    folder = write_history(tmp_path / "history", runs)
    candidate_document = history_run("d4e5f6a7", 5, {SINGLE: [101.0] * 5, other: [52.0] * 5})
    (tmp_path / "candidate.json").write_text(json.dumps(candidate_document))
    candidate = perf_gate.load_run(str(tmp_path / "candidate.json"), "time")
    settings = perf_gate.parse_arguments(["--window", folder, str(tmp_path / "candidate.json")])
    history = perf_gate.load_history(folder, candidate, settings)
    labels, series = perf_gate.trend_series(history, candidate)
    assert labels == ["a1b2c3d4", "b2c3d4e5", "c3d4e5f6", "candidate"]
    assert series[SINGLE] == pytest.approx([0.100, 0.115, 0.105, 0.101])  # b2c3d4e5: two runs pooled
    assert series[other][0] is None
    assert series[other][1:] == pytest.approx([0.050, 0.055, 0.052])

    figure = tmp_path / "trend.png"
    code, _ = window_gate(tmp_path, folder, candidate_document, "--trend", str(figure))
    assert code == 0
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert figure.stat().st_size > 10_000


def test_a_trend_that_cannot_be_written_is_unusable(tmp_path, capsys):
    folder = write_history(tmp_path / "history", [history_run("a1b2c3d4", 1, TYPICAL)])
    (tmp_path / "candidate.json").write_text(json.dumps(history_run("d4e5f6a7", 5, TYPICAL)))
    figure = tmp_path / "no-such-dir" / "trend.png"
    assert perf_gate.main(["--window", folder, str(tmp_path / "candidate.json"), "--trend", str(figure)]) == 2
    assert f"--trend {figure}: cannot write" in capsys.readouterr().out
    assert not os.path.exists(figure)
