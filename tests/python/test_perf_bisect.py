"""Tests of ci/perf-bisect (docs/PERF_GATE.md, "Bisecting a regression") on a throwaway git repo of
five commits: a fake project whose build is a shell script in the commit and whose run copies a
parbench JSON run of the step time named in the commit's step_ms file. No real timing: the runs
are made here, so the verdicts are deterministic, and the whole file takes a few seconds."""
import json
import shlex
import subprocess
import sys

import pytest

from scripts import REPO
from test_perf_gate import BASELINE_SAMPLES, benchmark_json, scaled

BISECT = REPO / "ci" / "perf-bisect"
FAST_MS, SLOW_MS = 250, 500  # BASELINE_SAMPLES's step, and the planted 2x slowdown


def git(repo, *arguments):
    return subprocess.run(["git", "-C", str(repo), *arguments], check=True, stdout=subprocess.PIPE,
                          universal_newlines=True).stdout.strip()


def make_repo(tmp_path, commits):
    """A repo with one commit per (step_ms, builds) of commits, oldest first; returns it and the shas."""
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "--quiet")
    git(repo, "config", "user.name", "perf-bisect test")
    git(repo, "config", "user.email", "perf-bisect@example.invalid")
    git(repo, "config", "commit.gpgsign", "false")
    shas = []
    for number, (step_ms, builds) in enumerate(commits, start=1):
        (repo / "step_ms").write_text(f"{step_ms}\n")
        (repo / "build.sh").write_text("exit 0\n" if builds else "echo 'error: broken build' >&2\nexit 1\n")
        (repo / "history.txt").write_text("".join(f"change {n}\n" for n in range(1, number + 1)))
        git(repo, "add", "-A")
        git(repo, "commit", "--quiet", "-m", f"commit {number}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    return repo, shas


def bisect(repo, tmp_path, good, bad, case="train/single", *extra):
    """Runs ci/perf-bisect in repo; the runs it copies lie in tmp_path/runs."""
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    for step_ms in (FAST_MS, SLOW_MS):
        document = benchmark_json(scaled(BASELINE_SAMPLES, step_ms / FAST_MS))
        (runs / f"{step_ms}.json").write_text(json.dumps(document))
    run = f"cp {shlex.quote(str(runs))}/$(cat step_ms).json {{out}}"
    return subprocess.run([sys.executable, str(BISECT), "--good", good, "--bad", bad, "--case", case,
                           "--build", "bash build.sh", "--run", run, *extra],
                          cwd=str(repo), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=120)


def assert_untouched(repo, head):
    """The user's working tree and HEAD stay as they were, and no worktree is left behind."""
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "status", "--porcelain") == ""
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_finds_the_planted_regression(tmp_path):
    repo, shas = make_repo(tmp_path, [(FAST_MS, True), (FAST_MS, True), (SLOW_MS, True), (SLOW_MS, True),
                                      (SLOW_MS, True)])
    result = bisect(repo, tmp_path, shas[0], "HEAD")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"first bad commit: {shas[2]} commit 3" in result.stdout
    tested = result.stdout.split("tested (oldest first)")[1]
    assert "good" in tested.split(shas[1][:12])[1].splitlines()[0]  # commit 2: good, x1.000
    line_3 = tested.split(shas[2][:12])[1].splitlines()[0]
    assert "BAD" in line_3 and "x2.000" in line_3 and "Holm-adjusted p" in line_3
    assert shas[3][:12] not in tested  # binary search: commit 4 never needed
    assert_untouched(repo, shas[4])


def test_a_range_without_regression_is_unusable(tmp_path):
    repo, shas = make_repo(tmp_path, [(FAST_MS, True), (FAST_MS, True), (SLOW_MS, True), (SLOW_MS, True),
                                      (SLOW_MS, True)])
    result = bisect(repo, tmp_path, shas[0], shas[1])
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "does not regress" in result.stderr
    assert_untouched(repo, shas[4])


def test_a_commit_that_does_not_build_is_skipped(tmp_path):
    # Commit 2 is the first slow one, commit 3 does not build: the search tests 3 first, skips it,
    # and still pins commit 2.
    repo, shas = make_repo(tmp_path, [(FAST_MS, True), (SLOW_MS, True), (SLOW_MS, False), (SLOW_MS, True),
                                      (SLOW_MS, True)])
    result = bisect(repo, tmp_path, shas[0], shas[4])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"first bad commit: {shas[1]} commit 2" in result.stdout
    tested = result.stdout.split("tested (oldest first)")[1]
    line_3 = tested.split(shas[2][:12])[1].splitlines()[0]
    assert "skip" in line_3 and "build failed (exit 1)" in line_3
    assert "error: broken build" in result.stdout  # the tail of its log
    assert_untouched(repo, shas[4])


def test_a_skipped_commit_at_the_boundary_leaves_a_range(tmp_path):
    # Commit 3 both plants the slowdown and does not build: 3 or 4 may be the first bad one.
    repo, shas = make_repo(tmp_path, [(FAST_MS, True), (FAST_MS, True), (SLOW_MS, False), (SLOW_MS, True),
                                      (SLOW_MS, True)])
    result = bisect(repo, tmp_path, shas[0], shas[4])
    assert result.returncode == 3, result.stdout + result.stderr
    assert "not pinned" in result.stdout
    candidates = result.stdout.split("not pinned")[1]
    assert f"{shas[2]} commit 3" in candidates and f"{shas[3]} commit 4" in candidates
    assert shas[1] not in candidates
    assert_untouched(repo, shas[4])


@pytest.mark.parametrize("good, bad, case, message", [
    ("no-such-rev", "HEAD", "train/single", "unknown revision 'no-such-rev'"),
    ("HEAD", "HEAD", "train/single", "empty range"),
    ("HEAD~4", "HEAD", "no/such/case", "matches no benchmark"),
    ("HEAD~4", "HEAD", "train/(", "is not a regex"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, good, bad, case, message):
    repo, shas = make_repo(tmp_path, [(FAST_MS, True)] * 2 + [(SLOW_MS, True)] * 3)
    result = bisect(repo, tmp_path, good, bad, case)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert_untouched(repo, shas[4])



def test_a_declared_counter_is_bisected_with_its_direction(tmp_path):
    # items_per_second is higher-is-better: halving it from commit 3 on is the regression found.
    repo, shas = make_repo(tmp_path, [(FAST_MS, True), (FAST_MS, True), (SLOW_MS, True), (SLOW_MS, True),
                                      (SLOW_MS, True)])
    result = bisect(repo, tmp_path, shas[0], "HEAD", "train/single", "--metric", "items_per_second")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"first bad commit: {shas[2]} commit 3" in result.stdout
    line_3 = result.stdout.split("tested (oldest first)")[1].split(shas[2][:12])[1].splitlines()[0]
    assert "BAD" in line_3 and "x0.500" in line_3
    # step_ms, lower-is-better, finds the same commit.
    result = bisect(repo, tmp_path, shas[0], "HEAD", "train/single", "--metric", "step_ms")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"first bad commit: {shas[2]} commit 3" in result.stdout


def test_a_metric_the_run_does_not_declare_is_one_line_and_exit_2(tmp_path):
    repo, shas = make_repo(tmp_path, [(FAST_MS, True)] * 2 + [(SLOW_MS, True)] * 3)
    result = bisect(repo, tmp_path, shas[0], "HEAD", "train/single", "--metric", "no_such_counter")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "--metric no_such_counter is not a counter the runs declare; allowed: time" in result.stderr
    assert_untouched(repo, shas[4])


def test_a_common_slowdown_is_bad_and_an_underpowered_commit_is_skipped(tmp_path):
    # 16 cases at 5 repetitions: commit 2 slows one case 2x (no single case can be significant
    # there: the gate says underpowered), commit 3 every case (the common shift's test finds it).
    from test_gate_decision import sixteen_cases
    baseline, one_slower = sixteen_cases(seed=5, slowdown_of=lambda index: 2.0 if index == 0 else 1.0)
    _, all_slower = sixteen_cases(seed=6, slowdown_of=lambda index: 2.0)
    runs = tmp_path / "runs"
    runs.mkdir()
    for name, samples in (("even", baseline), ("one", one_slower), ("all", all_slower)):
        (runs / f"{name}.json").write_text(json.dumps(benchmark_json(samples)))
    repo, shas = make_repo(tmp_path, [("even", True), ("one", True), ("all", True), ("all", True), ("all", True)])
    result = bisect(repo, tmp_path, shas[0], shas[4])
    assert result.returncode == 3, result.stdout + result.stderr
    tested = result.stdout.split("tested (oldest first)")[1]
    line_2, line_3 = (tested.split(sha[:12])[1].splitlines()[0] for sha in shas[1:3])
    assert "skip" in line_2 and "underpowered" in line_2
    assert "BAD" in line_3
    candidates = result.stdout.split("not pinned")[1]
    assert f"{shas[1]} commit 2" in candidates and f"{shas[2]} commit 3" in candidates
    assert_untouched(repo, shas[4])
