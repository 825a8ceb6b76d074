"""Tests of ci/perf-gate, the performance-regression gate (docs/PERF_GATE.md).

Inputs are built here as Google Benchmark 1.7.1 JSON with parbench's context and counters
(docs/JSON.md): per-repetition entries, then mean/median/stddev/cv aggregates.
"""
import json
import math
import os
import random
import statistics
import subprocess
import sys

import pytest
import scipy.stats

from parbench_results import perf_gate
from scripts import REPO

GATE = REPO / "ci" / "perf-gate"

SINGLE = "train/single/resnet50/batch:64/image:224/precision:fp32/data:device"
DDP = "train/ddp/resnet50/batch:64/image:224/precision:bf16/data:device/gpus:2/bucket_mib:25/overlap:on/scaling:weak"
ALLREDUCE = "comm/allreduce/bytes:1048576/ranks:2"
BATCH = 64

CONTEXT = {
    "date": "2025-06-01T12:00:00+00:00",
    "host_name": "gpu-node-1",
    "executable": "./build/parbench",
    "num_cpus": 16,
    "mhz_per_cpu": 2000,
    "cpu_scaling_enabled": False,
    "caches": [{"type": "Data", "level": 1, "size": 49152, "num_sharing": 2}],
    "load_avg": [0.5, 0.4, 0.3],
    "library_build_type": "release",
    "parbench_version": "0.1.0",
    "parbench_json_schema": "1.0.0",
    "git_sha": "0123456789abcdef0123456789abcdef01234567",
    "git_dirty": "false",
    "argv": "./build/parbench --benchmark_repetitions=10",
    "preset": "default",
    "timer": "event",
    "libtorch_version": "2.11.0",
    "cuda_version": "13.0",
    "cudnn_version": "9.10.2",
    "nccl_version": "2.27.7",
    "gpu_count": "2",
    "gpu_names": "NVIDIA H100 80GB HBM3;NVIDIA H100 80GB HBM3",
    "tf32_cudnn": "true",
    "tf32_matmul": "false",
    "host": "gpu-node-1",
}


def counters(name, real_time_ms):
    if name.startswith("comm/"):
        algbw_gbps = 1048576 / (real_time_ms * 1e-3) / 1e9
        return {"bytes": 1048576, "algbw_gbps": algbw_gbps, "busbw_gbps": algbw_gbps}  # busbw = algbw at 2 ranks
    return {"items_per_second": BATCH / (real_time_ms * 1e-3), "step_ms": real_time_ms, "batch": BATCH, "gpus": 1}


def entry(name, family_index, repetitions, **fields):
    return {"name": name, "family_index": family_index, "per_family_instance_index": 0, "run_name": name,
            "run_type": "iteration", "repetitions": repetitions, "threads": 1, **fields}


def aggregates(name, family_index, times_ms, time_unit):
    """Google Benchmark's mean/median/stddev/cv entries: the gate must skip them."""
    per_repetition = [{"real_time": t, "cpu_time": t / 10, **counters(name, t)} for t in times_ms]
    functions = {"mean": statistics.mean, "median": statistics.median, "stddev": statistics.stdev,
                 "cv": lambda values: statistics.stdev(values) / statistics.mean(values)}
    entries = []
    for aggregate_name, function in functions.items():
        values = {key: function([r[key] for r in per_repetition]) for key in per_repetition[0]}
        entries.append(entry(f"{name}_{aggregate_name}", family_index, len(times_ms), run_type="aggregate",
                             aggregate_name=aggregate_name,
                             aggregate_unit="percentage" if aggregate_name == "cv" else "time",
                             iterations=len(times_ms), time_unit=time_unit, **values))
    return entries


def benchmark_json(samples, context=None, errors=None, time_unit="ms"):
    """Google Benchmark JSON: samples maps a case name to its real_time per repetition, in ms;
    errors maps a case name to the error messages of errored repetitions."""
    errors = errors or {}
    benchmarks = []
    for family_index, name in enumerate(dict.fromkeys([*samples, *errors])):
        times_ms = samples.get(name, [])
        messages = errors.get(name, [])
        repetitions = len(times_ms) + len(messages)
        scale = {"ns": 1e6, "us": 1e3, "ms": 1.0, "s": 1e-3}[time_unit]
        for index, time_ms in enumerate(times_ms):
            benchmarks.append(entry(name, family_index, repetitions, repetition_index=index, iterations=5,
                                    real_time=time_ms * scale, cpu_time=time_ms * scale / 10, time_unit=time_unit,
                                    **counters(name, time_ms)))
        for index, message in enumerate(messages, start=len(times_ms)):
            benchmarks.append(entry(name, family_index, repetitions, repetition_index=index, iterations=0,
                                    real_time=0.0, cpu_time=0.0, time_unit=time_unit,
                                    error_occurred=True, error_message=message))
        if len(times_ms) >= 2:
            benchmarks += aggregates(name, family_index, [t * scale for t in times_ms], time_unit)
    return {"context": {**CONTEXT, **(context or {})}, "benchmarks": benchmarks}


def noisy(median_ms, repetitions=10, noise=0.01, seed=0):
    generator = random.Random(seed)
    return [median_ms * (1 + generator.gauss(0, noise)) for _ in range(repetitions)]


BASELINE_SAMPLES = {SINGLE: noisy(250.0, seed=1), DDP: noisy(140.0, seed=2)}


def scaled(samples, factor):
    return {name: [t * factor for t in times] for name, times in samples.items()}


def write(tmp_path, filename, document):
    path = tmp_path / filename
    path.write_text(json.dumps(document) if isinstance(document, dict) else document)
    return str(path)


def gate(tmp_path, baseline, candidate, *options):
    """Runs the gate in-process on two documents (dicts or raw text); returns its exit code."""
    return perf_gate.main([write(tmp_path, "baseline.json", baseline),
                           write(tmp_path, "candidate.json", candidate), *options])


def gate_report(tmp_path, baseline, candidate, *options):
    """Exit code and the --json-out report."""
    report_path = tmp_path / "report.json"
    code = gate(tmp_path, baseline, candidate, "--json-out", str(report_path), *options)
    return code, json.loads(report_path.read_text())


def verdicts(report):
    return {row["name"]: row["verdict"] for row in report["benchmarks"]}


# Decisions.

def test_identical_runs_pass(tmp_path):
    run = benchmark_json(BASELINE_SAMPLES)
    code, report = gate_report(tmp_path, run, run)
    assert code == 0
    assert verdicts(report) == {SINGLE: "pass", DDP: "pass"}
    assert all(row["p_value"] == 1.0 and row["change_pct"] == 0 for row in report["benchmarks"])


def test_uniform_slowdown_fails(tmp_path, capsys):
    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES),
                               benchmark_json(scaled(BASELINE_SAMPLES, 1.3)))
    assert code == 1
    assert report["outcome"] == "regression"
    assert set(verdicts(report).values()) == {"REGRESSION"}
    for row in report["benchmarks"]:
        assert row["change_pct"] == pytest.approx(30.0)
        assert row["p_value"] < 0.001
    assert "REGRESSION (exit 1)" in capsys.readouterr().out


def test_uniform_improvement_passes(tmp_path):
    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES),
                               benchmark_json(scaled(BASELINE_SAMPLES, 0.7)))
    assert code == 0
    assert set(verdicts(report).values()) == {"improved"}


def test_noise_within_threshold_passes(tmp_path):
    candidate = {SINGLE: noisy(252.0, seed=11), DDP: noisy(138.0, seed=12)}
    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES), benchmark_json(candidate))
    assert code == 0
    assert set(verdicts(report).values()) == {"pass"}


def test_significant_change_within_threshold_passes(tmp_path):
    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES),
                               benchmark_json(scaled(BASELINE_SAMPLES, 1.03)))
    assert code == 0
    assert all(row["p_value"] < 0.05 and row["verdict"] == "pass" for row in report["benchmarks"])


def test_slowdown_beyond_threshold_without_significance_passes(tmp_path):
    baseline = {SINGLE: [80, 90, 100, 110, 120, 130, 140]}
    candidate = {SINGLE: [85, 96, 100, 117, 125, 135, 145]}  # median +6.4%, distributions overlap
    code, report = gate_report(tmp_path, benchmark_json(baseline), benchmark_json(candidate))
    assert code == 0
    [row] = report["benchmarks"]
    assert row["change_pct"] > 5 and row["p_value"] > 0.05
    assert row["verdict"] == "slower, not significant"


def test_threshold_option(tmp_path):
    slower = benchmark_json(scaled(BASELINE_SAMPLES, 1.3))
    assert gate(tmp_path, benchmark_json(BASELINE_SAMPLES), slower, "--threshold", "35") == 0
    assert gate(tmp_path, benchmark_json(BASELINE_SAMPLES), slower, "--threshold", "25") == 1


def test_alpha_option(tmp_path):
    baseline = {SINGLE: noisy(100.0, noise=0.05, seed=3)}
    candidate = {SINGLE: noisy(108.0, noise=0.05, seed=4)}
    code, report = gate_report(tmp_path, benchmark_json(baseline), benchmark_json(candidate))
    p_value = report["benchmarks"][0]["p_value"]
    assert report["benchmarks"][0]["change_pct"] > 5
    assert gate(tmp_path, benchmark_json(baseline), benchmark_json(candidate), "--alpha", str(p_value * 0.9)) == 0
    assert gate(tmp_path, benchmark_json(baseline), benchmark_json(candidate), "--alpha", str(min(0.99, p_value * 1.1))) == 1


def test_time_units_are_normalised(tmp_path):
    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES),
                               benchmark_json(BASELINE_SAMPLES, time_unit="us"))
    assert code == 0
    assert all(row["change_pct"] == pytest.approx(0, abs=1e-9) for row in report["benchmarks"])


# Metric.

def test_items_per_second_lower_is_a_regression(tmp_path):
    slower = benchmark_json(scaled(BASELINE_SAMPLES, 1.3))  # 30% more time: throughput falls by 23%
    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES), slower, "--metric", "items_per_second")
    assert code == 1
    assert report["metric_unit"] == "items/s"
    for row in report["benchmarks"]:
        assert row["verdict"] == "REGRESSION"
        assert row["change_pct"] == pytest.approx(100 * (1 / 1.3 - 1))


def test_items_per_second_higher_is_an_improvement(tmp_path):
    faster = benchmark_json(scaled(BASELINE_SAMPLES, 0.7))
    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES), faster, "--metric", "items_per_second")
    assert code == 0
    assert set(verdicts(report).values()) == {"improved"}
    assert all(row["change_pct"] > 0 for row in report["benchmarks"])


def test_cases_without_items_per_second_are_not_compared_on_it(tmp_path):
    samples = {**BASELINE_SAMPLES, ALLREDUCE: noisy(0.5, seed=5)}
    code, report = gate_report(tmp_path, benchmark_json(samples), benchmark_json(samples),
                               "--metric", "items_per_second")
    assert code == 0
    assert verdicts(report)[ALLREDUCE] == "no metric"
    code, report = gate_report(tmp_path, benchmark_json(samples), benchmark_json(samples))
    assert verdicts(report)[ALLREDUCE] == "pass"


# Unmatched and errored benchmarks.

KILLED = "rank 1 was killed by signal 9 (Killed) (rank 0 at iteration 3 of repetition 1, rank 1 at set-up)"


def test_benchmark_missing_in_candidate_fails_unless_allowed(tmp_path, capsys):
    candidate = {SINGLE: BASELINE_SAMPLES[SINGLE], ALLREDUCE: noisy(0.5, seed=5)}
    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES), benchmark_json(candidate))
    assert code == 1
    assert report["outcome"] == "regression"
    assert verdicts(report) == {SINGLE: "pass", DDP: "MISSING in candidate", ALLREDUCE: "only in candidate"}
    out = capsys.readouterr().out
    assert f"MISSING in candidate: {DDP} (fails the gate)" in out
    assert f"only in candidate: {ALLREDUCE} (does not fail)" in out

    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES), benchmark_json(candidate), "--allow-missing")
    assert code == 0
    assert report["allow_missing"] is True
    assert f"MISSING in candidate: {DDP} (reported only (--allow-missing))" in capsys.readouterr().out


def test_case_failed_in_candidate_fails_and_is_named_with_its_error(tmp_path, capsys):
    candidate = benchmark_json({SINGLE: BASELINE_SAMPLES[SINGLE]}, errors={DDP: [KILLED] * 10})
    markdown = tmp_path / "summary.md"
    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES), candidate, "--markdown-out", str(markdown))
    assert code == 1
    assert verdicts(report) == {SINGLE: "pass", DDP: "FAILED in candidate"}
    [ddp] = [row for row in report["benchmarks"] if row["name"] == DDP]
    assert ddp["candidate_error"] == KILLED
    assert ddp["candidate_repetitions"] == 0 and ddp["baseline_repetitions"] == 10
    expected = f"FAILED in candidate: {DDP}: {KILLED} (fails the gate)"
    assert expected in capsys.readouterr().out
    assert expected in markdown.read_text()
    assert gate(tmp_path, benchmark_json(BASELINE_SAMPLES), candidate, "--allow-missing") == 0


def test_candidate_that_failed_every_case_fails_rather_than_being_unusable(tmp_path):
    candidate = benchmark_json({}, errors={SINGLE: [KILLED] * 3, DDP: [KILLED] * 3})
    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES), candidate)
    assert code == 1
    assert set(verdicts(report).values()) == {"FAILED in candidate"}
    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES), candidate, "--allow-missing")
    assert code == 2
    assert any("nothing was compared" in reason for reason in report["unusable"])


def test_errored_repetitions_are_skipped_and_reported(tmp_path, capsys):
    candidate = benchmark_json({SINGLE: BASELINE_SAMPLES[SINGLE][:8], DDP: []},
                               errors={SINGLE: ["CUDA out of memory"] * 2, DDP: ["skipped: needs 2 GPUs, 0 visible"] * 10})
    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES), candidate)
    assert code == 1  # ddp ran in the baseline and was skipped in the candidate
    assert verdicts(report) == {SINGLE: "pass", DDP: "FAILED in candidate"}
    assert report["benchmarks"][0]["candidate_repetitions"] == 8
    assert f"candidate: {SINGLE}: 2 of 10 repetitions errored: CUDA out of memory" in report["errors"]
    assert f"candidate: {DDP}: 10 of 10 repetitions errored: skipped: needs 2 GPUs, 0 visible" in report["errors"]
    assert "needs 2 GPUs, 0 visible" in capsys.readouterr().out
    assert gate(tmp_path, benchmark_json(BASELINE_SAMPLES), candidate, "--allow-missing") == 0


def test_benchmark_measured_by_the_candidate_alone_does_not_fail(tmp_path):
    baseline = benchmark_json({SINGLE: BASELINE_SAMPLES[SINGLE]}, errors={DDP: ["skipped: needs 2 GPUs, 1 visible"] * 3})
    code, report = gate_report(tmp_path, baseline, benchmark_json(BASELINE_SAMPLES))
    assert code == 0
    assert verdicts(report) == {SINGLE: "pass", DDP: "error in baseline"}


def test_benchmark_errored_on_both_sides_does_not_fail(tmp_path):
    run = benchmark_json({SINGLE: BASELINE_SAMPLES[SINGLE]}, errors={DDP: ["skipped: needs 2 GPUs, 1 visible"] * 3})
    code, report = gate_report(tmp_path, run, run)
    assert code == 0
    assert verdicts(report)[DDP] == "error in both"


def test_benchmark_in_the_baseline_only_and_unmeasured_there_does_not_fail(tmp_path):
    baseline = benchmark_json({SINGLE: BASELINE_SAMPLES[SINGLE]}, errors={DDP: ["skipped: needs 2 GPUs, 1 visible"] * 3})
    code, report = gate_report(tmp_path, baseline, benchmark_json({SINGLE: BASELINE_SAMPLES[SINGLE]}))
    assert code == 0
    assert verdicts(report)[DDP] == "only in baseline"


def test_nothing_in_common_is_unusable(tmp_path, capsys):
    # Another model's run as the baseline: not a candidate that lost every case (exit 1), but
    # two runs the gate cannot compare (exit 2), with or without --allow-missing.
    baseline, candidate = benchmark_json({SINGLE: BASELINE_SAMPLES[SINGLE]}), benchmark_json({DDP: BASELINE_SAMPLES[DDP]})
    for options in ([], ["--allow-missing"]):
        code, report = gate_report(tmp_path, baseline, candidate, *options)
        assert code == 2
        [reason] = report["unusable"]
        assert reason.startswith("nothing in common: none of the baseline's 1 benchmarks") and SINGLE in reason
    assert "unusable: nothing in common" in capsys.readouterr().out


# Unusable input.

@pytest.mark.parametrize("text", ["", "  \n", "{\"context\": {", "not json at all"], ids=["empty", "blank", "truncated", "garbage"])
def test_malformed_or_empty_file_is_unusable(tmp_path, text):
    assert gate(tmp_path, benchmark_json(BASELINE_SAMPLES), text) == 2
    assert gate(tmp_path, text, benchmark_json(BASELINE_SAMPLES)) == 2


def test_missing_file_is_unusable(tmp_path):
    assert perf_gate.main([str(tmp_path / "absent.json"), write(tmp_path, "c.json", benchmark_json(BASELINE_SAMPLES))]) == 2


@pytest.mark.parametrize("document", [
    {"foo": 1},
    {"context": CONTEXT, "benchmarks": []},
    {"context": CONTEXT, "benchmarks": [42]},
    {"context": CONTEXT, "benchmarks": [{"name": SINGLE}]},
], ids=["no-benchmarks-key", "no-benchmarks", "entry-not-object", "entry-without-run-type"])
def test_not_benchmark_json_is_unusable(tmp_path, document):
    assert gate(tmp_path, benchmark_json(BASELINE_SAMPLES), json.dumps(document)) == 2


def test_aggregates_only_is_unusable(tmp_path, capsys):
    run = benchmark_json(BASELINE_SAMPLES)
    run["benchmarks"] = [b for b in run["benchmarks"] if b["run_type"] == "aggregate"]
    assert gate(tmp_path, benchmark_json(BASELINE_SAMPLES), run) == 2
    assert "--benchmark_report_aggregates_only" in capsys.readouterr().out


def test_bad_metric_value_is_unusable(tmp_path):
    run = benchmark_json(BASELINE_SAMPLES)
    run["benchmarks"][0]["real_time"] = "fast"
    assert gate(tmp_path, benchmark_json(BASELINE_SAMPLES), run) == 2
    run["benchmarks"][0]["real_time"], run["benchmarks"][0]["time_unit"] = 250.0, "fortnights"
    assert gate(tmp_path, benchmark_json(BASELINE_SAMPLES), run) == 2


@pytest.mark.parametrize("version, expected", [("1.0.0", 0), ("1.4.2", 0), ("2.0.0", 2), ("0.9.0", 2), ("one", 2), (None, 2)])
def test_schema_major_version(tmp_path, version, expected):
    candidate = benchmark_json(BASELINE_SAMPLES)
    if version is None:
        del candidate["context"]["parbench_json_schema"]
    else:
        candidate["context"]["parbench_json_schema"] = version
    assert gate(tmp_path, benchmark_json(BASELINE_SAMPLES), candidate) == expected


@pytest.mark.parametrize("options", [
    ["--threshold", "-1"], ["--threshold", "abc"], ["--threshold", "nan"],
    ["--alpha", "0"], ["--alpha", "1"], ["--alpha", "x"],
    ["--too-few-repetitions", "maybe"],
])
def test_bad_option_values_exit_2(tmp_path, options):
    run = benchmark_json(BASELINE_SAMPLES)
    with pytest.raises(SystemExit) as exit_info:
        gate(tmp_path, run, run, *options)
    assert exit_info.value.code == 2


# Context.

@pytest.mark.parametrize("key, value", [("gpu_names", "NVIDIA A100-SXM4-80GB;NVIDIA A100-SXM4-80GB"),
                                        ("gpu_count", "1"), ("libtorch_version", "2.10.0"), ("cuda_version", "12.8")])
def test_context_mismatch_is_unusable_unless_allowed(tmp_path, capsys, key, value):
    baseline, candidate = benchmark_json(BASELINE_SAMPLES), benchmark_json(BASELINE_SAMPLES, context={key: value})
    code, report = gate_report(tmp_path, baseline, candidate)
    assert code == 2
    assert any(key in reason for reason in report["unusable"])
    assert f"context {key} differs" in capsys.readouterr().out

    code, report = gate_report(tmp_path, baseline, candidate, "--allow-context-mismatch")
    assert code == 0
    assert any(key in warning for warning in report["warnings"])


def test_other_context_differences_are_ignored(tmp_path):
    candidate = benchmark_json(BASELINE_SAMPLES, context={"host": "gpu-node-7", "git_sha": "f" * 40, "date": "2025-07-01"})
    assert gate(tmp_path, benchmark_json(BASELINE_SAMPLES), candidate) == 0


# Too few repetitions.

FEW = {SINGLE: [250.0, 251.0, 249.0]}


def test_too_few_repetitions_falls_back_to_threshold(tmp_path, capsys):
    code, report = gate_report(tmp_path, benchmark_json(FEW), benchmark_json(scaled(FEW, 1.3)))
    assert code == 1
    [row] = report["benchmarks"]
    assert row["verdict"] == "REGRESSION" and row["threshold_only"] and row["p_value"] is None
    assert "REGRESSION (threshold only, <5 reps)" in capsys.readouterr().out
    assert gate(tmp_path, benchmark_json(FEW), benchmark_json(scaled(FEW, 1.02))) == 0


def test_too_few_repetitions_fail_mode_is_unusable(tmp_path):
    for factor in (1.0, 1.3):
        code, report = gate_report(tmp_path, benchmark_json(FEW), benchmark_json(scaled(FEW, factor)),
                                   "--too-few-repetitions=fail")
        assert code == 2
        assert verdicts(report) == {SINGLE: "too few repetitions"}


def test_one_repetition_without_aggregates(tmp_path):
    code, report = gate_report(tmp_path, benchmark_json({SINGLE: [250.0]}), benchmark_json({SINGLE: [400.0]}))
    assert code == 1
    assert report["benchmarks"][0]["threshold_only"]


def test_five_repetitions_are_enough_for_the_u_test(tmp_path):
    five = {SINGLE: noisy(250.0, repetitions=5, seed=6)}
    code, report = gate_report(tmp_path, benchmark_json(five), benchmark_json(scaled(five, 1.3)),
                               "--too-few-repetitions=fail")
    assert code == 1
    assert not report["benchmarks"][0]["threshold_only"]


# Outputs.

def test_json_and_markdown_outputs(tmp_path):
    json_path, markdown_path = tmp_path / "gate.json", tmp_path / "summary.md"
    code = gate(tmp_path, benchmark_json(BASELINE_SAMPLES), benchmark_json(scaled(BASELINE_SAMPLES, 1.3)),
                "--json-out", str(json_path), "--markdown-out", str(markdown_path))
    assert code == 1

    report = json.loads(json_path.read_text())
    assert report["outcome"] == "regression" and report["exit_code"] == 1
    assert report["metric"] == "time" and report["metric_unit"] == "s"
    assert report["threshold_pct"] == 5.0 and report["alpha"] == 0.05
    [single] = [row for row in report["benchmarks"] if row["name"] == SINGLE]
    assert single["baseline_median"] == pytest.approx(statistics.median(BASELINE_SAMPLES[SINGLE]) * 1e-3)
    assert single["baseline_repetitions"] == single["candidate_repetitions"] == 10

    markdown = markdown_path.read_text()
    assert markdown.startswith("### parbench perf gate: REGRESSION (exit 1)")
    table = [line for line in markdown.splitlines() if line.startswith("|")]
    cells = [line.strip("|").split(" | ") for line in table]
    assert len(table) == 2 + len(BASELINE_SAMPLES)
    assert set(table[1].strip("|").split("|")) == {"---"}
    assert table[1].count("|") == table[0].count("|")
    assert all(len(row) == len(cells[0]) == 9 for row in cells[2:])
    assert f"| `{SINGLE}` |" in markdown


def test_markdown_is_appended_as_step_summaries_expect(tmp_path):
    summary = tmp_path / "step_summary.md"
    summary.write_text("## Benchmarks\n\n")
    run = benchmark_json(BASELINE_SAMPLES)
    gate(tmp_path, run, run, "--markdown-out", str(summary))
    gate(tmp_path, run, run, "--metric", "items_per_second", "--markdown-out", str(summary))
    text = summary.read_text()
    assert text.startswith("## Benchmarks")
    assert text.count("### parbench perf gate: PASS") == 2


def test_outputs_are_written_for_unusable_input(tmp_path):
    json_path, markdown_path = tmp_path / "gate.json", tmp_path / "summary.md"
    code = gate(tmp_path, benchmark_json(BASELINE_SAMPLES), "",
                "--json-out", str(json_path), "--markdown-out", str(markdown_path))
    assert code == 2
    report = json.loads(json_path.read_text())
    assert report["outcome"] == "unusable" and report["benchmarks"] == []
    assert "empty file" in report["unusable"][0]
    assert "UNUSABLE (exit 2)" in markdown_path.read_text()


# The Mann-Whitney U test against scipy.

def u_test_samples():
    generator = random.Random(2024)
    cases = [([1.0, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0]),
             ([1.0] * 6, [1.0] * 6),
             ([1.0, 1.0, 2.0], [1.0, 2.0, 2.0, 3.0])]
    for size_x, size_y in [(5, 5), (10, 10), (7, 12), (30, 25), (3, 4)]:
        cases.append(([generator.gauss(100, 5) for _ in range(size_x)],
                      [generator.gauss(103, 5) for _ in range(size_y)]))
        # Ties: values rounded onto a coarse grid, as timings at the clock's resolution are.
        cases.append(([float(round(generator.gauss(100, 5))) for _ in range(size_x)],
                      [float(round(generator.gauss(102, 5))) for _ in range(size_y)]))
    return cases


@pytest.mark.parametrize("x, y", u_test_samples())
def test_u_test_matches_scipy_asymptotic(x, y):
    expected = scipy.stats.mannwhitneyu(x, y, use_continuity=True, alternative="two-sided", method="asymptotic").pvalue
    if math.isnan(expected):
        # All values tied: some scipy versions answer nan; the gate answers 1.0 (no evidence of a change).
        assert len(set(x + y)) == 1
        expected = 1.0
    assert perf_gate.mann_whitney_u_p_value(x, y) == pytest.approx(expected, abs=1e-9, rel=0)
    assert perf_gate.mann_whitney_u_p_value(y, x) == pytest.approx(expected, abs=1e-9, rel=0)


def test_u_test_samples_include_ties():
    assert any(len(set(x + y)) < len(x + y) for x, y in u_test_samples()[3:])


# The command itself.

def test_script_runs_by_its_shebang():
    # Its shebang's python3 is the first on PATH: this python, as in an activated .venv.
    path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"
    result = subprocess.run([str(GATE), "--help"], capture_output=True, text=True, check=False,
                            env={**os.environ, "PATH": path})
    assert result.returncode == 0
    assert all(option in result.stdout for option in
               ["--metric", "--threshold", "--alpha", "--too-few-repetitions", "--allow-missing",
                "--allow-context-mismatch", "--correction", "--window", "--window-size", "--trend", "--json-out",
                "--markdown-out"])


def test_gate_needs_neither_scipy_nor_numpy(tmp_path):
    baseline = write(tmp_path, "baseline.json", benchmark_json(BASELINE_SAMPLES))
    candidate = write(tmp_path, "candidate.json", benchmark_json(scaled(BASELINE_SAMPLES, 1.3)))
    # A None entry in sys.modules makes importing that module fail.
    program = ("import runpy, sys; sys.modules['scipy'] = sys.modules['numpy'] = None; "
               f"sys.argv = ['perf-gate', {baseline!r}, {candidate!r}]; runpy.run_path({str(GATE)!r}, run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stderr
    assert "REGRESSION" in result.stdout


def test_google_benchmark_name_suffixes_do_not_split_a_benchmark(tmp_path):
    baseline = benchmark_json({f"{SINGLE}/iterations:10/manual_time": noisy(250.0, seed=1)})
    candidate = benchmark_json({f"{SINGLE}/manual_time": noisy(250.0 * 1.3, seed=3)})
    code, report = gate_report(tmp_path, baseline, candidate)
    assert code == 1
    assert verdicts(report) == {SINGLE: "REGRESSION"}


# Fails closed.

def run_module(*arguments):
    """python -m parbench_results.perf_gate, this checkout's package first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plots"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "parbench_results.perf_gate", *arguments],
                          capture_output=True, text=True, check=False, env=env)


def test_module_runs_main_and_returns_its_exit_code(tmp_path):
    baseline = write(tmp_path, "baseline.json", benchmark_json(BASELINE_SAMPLES))
    slower = write(tmp_path, "slower.json", benchmark_json(scaled(BASELINE_SAMPLES, 1.3)))
    assert run_module(baseline, baseline).returncode == 0
    result = run_module(baseline, slower)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "REGRESSION" in result.stdout
    missing = run_module(baseline, str(tmp_path / "absent.json"))
    assert missing.returncode == 2
    assert "absent.json" in missing.stdout + missing.stderr
    assert run_module("--threshold", "-1", baseline, baseline).returncode == 2


def test_a_repetition_given_twice_is_unusable_not_pooled(tmp_path, capsys):
    baseline = benchmark_json(BASELINE_SAMPLES)
    # A 2x regression of SINGLE, hidden by a copy of the baseline's repetitions in the candidate:
    # pooled, the median would stay where it was.
    candidate = benchmark_json({**BASELINE_SAMPLES, SINGLE: [2 * t for t in BASELINE_SAMPLES[SINGLE]]})
    copies = [dict(b) for b in baseline["benchmarks"] if b["run_name"] == SINGLE and b["run_type"] == "iteration"]
    candidate["benchmarks"] += copies + copies
    assert gate(tmp_path, baseline, candidate) == 2
    out = capsys.readouterr().out
    assert f"repeats {SINGLE} repetition_index 0" in out
    # In the baseline too.
    assert gate(tmp_path, candidate, baseline) == 2


def test_the_same_repetition_in_two_window_runs_is_not_a_duplicate(tmp_path):
    # Distinct files each hold their own repetition 0..n-1: only one file repeating one is refused.
    run = benchmark_json(BASELINE_SAMPLES)
    assert gate(tmp_path, run, run) == 0


@pytest.mark.parametrize("text", [
    "[" * 100000 + "]" * 100000,
    '{"context": {"parbench_json_schema": "1.0.0", "x": ' + "[" * 100000 + "]" * 100000 + '}, "benchmarks": [1]}',
    '{"context": {"parbench_json_schema": "1.0.0"}, "benchmarks": [{"name": "a", "run_type": "iteration", '
    '"run_name": ["not", "a", "string"]}]}',
    '{"context": {"parbench_json_schema": "1.0.0"}, "benchmarks": [{"name": "a", "run_type": "iteration", '
    '"repetition_index": 0, "real_time": 1, "time_unit": "ms", "error_occurred": true, "error_message": {"odd": 1}}]}',
    '{"context": {"parbench_json_schema": "1.0.0"}, "benchmarks": [{"name": "a", "run_type": "iteration", '
    '"real_time": 1e999, "time_unit": "ms"}]}',
    '{"context": {"parbench_json_schema": "1.0.0"}, "benchmarks": [{"name": "a", "run_type": "iteration", '
    '"real_time": ' + "9" * 5000 + ', "time_unit": "ms"}]}',
], ids=["nested-array", "nested-in-context", "run-name-not-a-string", "error-message-object", "infinite-time",
        "huge-integer"])
def test_odd_json_gives_one_line_not_a_traceback(tmp_path, text):
    baseline = write(tmp_path, "baseline.json", benchmark_json(BASELINE_SAMPLES))
    odd = write(tmp_path, "odd.json", text)
    for arguments in ((baseline, odd), (odd, baseline)):
        result = run_module(*arguments)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "Traceback" not in result.stdout + result.stderr
        assert len(result.stderr.strip().splitlines()) <= 1, result.stderr


def test_an_internal_error_is_one_line_and_unusable(tmp_path, capsys, monkeypatch):
    def crash(*_):
        raise KeyError("injected\nsecond line")

    monkeypatch.setattr(perf_gate, "run_gate", crash)
    run = benchmark_json(BASELINE_SAMPLES)
    assert gate(tmp_path, run, run) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "KeyError" in err and "Traceback" not in err
