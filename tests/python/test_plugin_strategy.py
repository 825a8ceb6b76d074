"""A strategy registered from one test file (tests/test_only_strategy.cpp: `test_only`, with its
own option `--knob=once|twice`) in a parbench binary built with it: it is listed and filtered,
named, run on CPU, written to the JSON with its fields, reported and gated like the strategies
parbench ships, with no change anywhere else."""
import json
import os
import subprocess

import pytest

from parbench_results import perf_gate
from test_plots_report import MAKE_REPORT, slower_beyond_spread, row, run, tables

BINARY = os.environ.get("PARBENCH_WITH_TEST_STRATEGY")
pytestmark = pytest.mark.skipif(not BINARY, reason="PARBENCH_WITH_TEST_STRATEGY names no binary (ctest sets it)")

SMALL = ["--models=tinycnn", "--batch=4", "--image=16", "--warmup=1", "--iterations=2"]
PREFIX = "train/test_only/tinycnn/batch:4/image:16/precision:fp32/data:device"
SETUP = "tinycnn, batch 4, image 16\u00d716, fp32, data on device"


def parbench(*arguments):
    return subprocess.run([BINARY, *arguments], capture_output=True, text=True, check=False, timeout=300)


@pytest.fixture(scope="module")
def plugin_run(tmp_path_factory):
    """single and both knob values, 5 repetitions each, on CPU."""
    out = tmp_path_factory.mktemp("plugin") / "run.json"
    result = parbench("--strategies=single,test_only", "--knob=once,twice", "--repetitions=5", *SMALL,
                      f"--benchmark_out={out}")
    assert result.returncode == 0, result.stderr
    return out


def test_its_option_is_a_flag_with_help_and_checked_values():
    assert "--knob=LIST" in parbench("--help").stdout
    refused = parbench("--knob=thrice")
    assert refused.returncode == 2
    assert refused.stderr.strip() == "parbench: --knob=thrice is not one of: once, twice"


def test_its_cases_are_listed_named_by_the_option_and_filtered():
    listed = parbench("--strategies=test_only", "--knob=once,twice", *SMALL, "--benchmark_list_tests")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == [f"{PREFIX}/knob:{knob}/iterations:2/manual_time" for knob in ("once", "twice")]
    filtered = parbench("--knob=once,twice", *SMALL, "--benchmark_filter=knob:twice", "--benchmark_list_tests")
    assert filtered.stdout.split() == [f"{PREFIX}/knob:twice/iterations:2/manual_time"]


def test_its_skip_rule_applies():
    listed = parbench("--strategies=test_only", "--knob=twice", "--models=tinycnn", "--batch=1", "--image=16",
                      "--iterations=1", "--repetitions=1")
    # Its one case skipped, nothing ran: exit 3, and the last line says so.
    assert listed.returncode == 3, listed.stderr
    assert "knob:twice needs a batch of at least 2" in listed.stderr
    assert listed.stderr.splitlines()[-1].startswith("parbench: incomplete (exit status 3): no case ran")


def test_a_graph_of_it_is_listed_once_skipped_without_its_options():
    run = parbench("--strategies=test_only", "--knob=once,twice", "--cuda-graph=on", *SMALL, "--repetitions=1")
    assert run.returncode == 3, run.stderr  # its one case skipped: nothing ran
    assert "test_only cannot be captured in a CUDA graph" in run.stderr
    listed = parbench("--strategies=test_only", "--knob=once,twice", "--cuda-graph=on", *SMALL, "--benchmark_list_tests")
    assert listed.stdout.split() == [f"{PREFIX}/graph:on/iterations:2/manual_time"]


def test_the_json_carries_its_fields_in_name_order(plugin_run):
    entries = [entry for entry in json.loads(plugin_run.read_text())["benchmarks"]
               if entry["run_name"].startswith("train/test_only/") and entry["run_type"] == "iteration"]
    assert len(entries) == 10
    for entry in entries:
        assert not entry.get("error_occurred"), entry
        knob = entry["run_name"].split("/knob:")[1].split("/")[0]
        assert list(entry["fields"].items()) == [
            ("strategy", "test_only"), ("model", "tinycnn"), ("batch", 4), ("image", 16), ("precision", "fp32"),
            ("data", "device"), ("knob", knob), ("graph", "off")]
        assert f"steps_per_step={1 if knob == 'once' else 2}" in entry["label"]


def test_the_report_has_a_row_per_knob_value(plugin_run, tmp_path):
    result = run(MAKE_REPORT, tmp_path, [plugin_run])
    assert result.returncode == 0, result.stderr
    summary = tables((tmp_path / "REPORT.md").read_text(encoding="utf-8"), "Summary")[SETUP]
    once, twice = row(summary, "test_only", "knob once"), row(summary, "test_only", "knob twice")
    assert once["speedup vs single"] and twice["speedup vs single"]


def test_the_gate_judges_its_cases(plugin_run, tmp_path):
    report = tmp_path / "gate.json"
    assert perf_gate.main([str(plugin_run), str(plugin_run), "--json-out", str(report)]) == 0
    verdicts = {entry["name"]: entry["verdict"] for entry in json.loads(report.read_text())["benchmarks"]}
    assert verdicts[f"{PREFIX}/knob:once"] == "pass" and verdicts[f"{PREFIX}/knob:twice"] == "pass"
    # The same entries ten times as slow (beyond any spread of the run): the gate names the plug-in's cases as regressions.
    data = json.loads(plugin_run.read_text())
    slower = slower_beyond_spread(data["benchmarks"], lambda name: "/knob:" in name)
    (tmp_path / "candidate.json").write_text(json.dumps(dict(data, benchmarks=slower)))
    assert perf_gate.main([str(plugin_run), str(tmp_path / "candidate.json"), "--json-out", str(report)]) == 1
    verdicts = {entry["name"]: entry["verdict"] for entry in json.loads(report.read_text())["benchmarks"]}
    assert verdicts[f"{PREFIX}/knob:once"] == verdicts[f"{PREFIX}/knob:twice"] == "REGRESSION"
    assert verdicts["train/single/tinycnn/batch:4/image:16/precision:fp32/data:device"] == "pass"
