"""Schema 1.4.0's case fields (docs/JSON.md): the reader takes strategy, model and options from
each entry's `fields`, not from its name, so a strategy the Python side has never heard of (a
plug-in, `test_only` with its own option `knob`) is loaded, ordered, reported and gated. Older
files, without `fields`, give the same cases from their names."""
import copy
import json
import re

import pytest

from parbench_results import cases as pr
from parbench_results import perf_gate
from parbench_results.schema import ResultsError, case_fields
from scripts import REPO
from test_perf_gate import write
from test_plots_report import MAKE_REPORT, row, run, tables

FIXTURE = REPO / "tests" / "python" / "fixtures" / "schema_1_4_plugin.json"
PREFIX = "train/{}/tinycnn/batch:8/image:64/precision:fp32/data:device"
SINGLE = PREFIX.format("single")
TEST_ONLY = PREFIX.format("test_only") + "/knob:fast"
PIPELINE = PREFIX.format("pipeline") + "/gpus:2/split:4/schedule:gpipe"
SETUP = "tinycnn, batch 8, image 64\u00d764, fp32, data on device"


def document():
    return json.loads(FIXTURE.read_text())


def before_fields(data):
    """The same run as a schema 1.3.0 file writes it: no `fields`, no context lists."""
    old = copy.deepcopy(data)
    old["context"]["parbench_json_schema"] = "1.3.0"
    for key in ("strategies", "schedules"):
        del old["context"][key]
    for entry in old["benchmarks"]:
        del entry["fields"]
    return old


def by_strategy(results):
    return {case.strategy: case for case in results.train_cases()}


def test_fields_come_from_the_json_with_numbers_as_the_name_writes_them():
    cases = by_strategy(pr.load([str(FIXTURE)]))
    plugin = cases["test_only"]
    assert (plugin.name, plugin.model) == (TEST_ONLY + "/manual_time", "tinycnn")
    assert plugin.fields == {"batch": "8", "image": "64", "precision": "fp32", "data": "device", "knob": "fast",
                             "graph": "off"}
    assert plugin.config() == "1 CPU device, knob fast"
    # Options at their default are fields but not part of the name, and left out of titles as names leave them out.
    pipeline = cases["pipeline"]
    assert (pipeline.fields["lanes"], pipeline.split_size, pipeline.gpus) == ("1", 4, 2)
    assert "lanes" not in pipeline.named_fields and "graph" not in pipeline.named_fields
    assert pipeline.title() == "pipeline (2 CPU devices, gpipe, split 4)"


def test_fields_win_over_the_name():
    data = document()
    entry = next(e for e in data["benchmarks"] if e["run_name"].startswith(TEST_ONLY))
    assert case_fields(entry)["knob"] == "fast"
    entry = dict(entry, fields=dict(entry["fields"], knob="slow"))
    assert case_fields(entry)["knob"] == "slow"


def test_a_file_without_fields_loads_the_same_cases_from_names(tmp_path):
    new = pr.load([str(FIXTURE)])
    old = pr.load([write(tmp_path, "old.json", before_fields(document()))])
    for case in new.train_cases():
        twin = next(c for c in old.train_cases() if c.name == case.name)
        assert (twin.strategy, twin.model, twin.named_fields, twin.series, twin.title(), twin.setup) == \
            (case.strategy, case.model, case.named_fields, case.series, case.title(), case.setup)


def test_strategies_are_ordered_as_the_context_lists_them_else_unknown_ones_last(tmp_path):
    listed = pr.load([str(FIXTURE)]).by_setup()
    assert [case.strategy for cases in listed.values() for case in cases] == ["single", "test_only", "pipeline"]
    data = document()
    del data["context"]["strategies"]
    unlisted = pr.load([write(tmp_path, "unlisted.json", data)]).by_setup()
    assert [case.strategy for cases in unlisted.values() for case in cases] == ["single", "pipeline", "test_only"]


@pytest.mark.parametrize("fields, problem", [
    ("fast", "'fields' is not an object"),
    ({"model": "tinycnn"}, "'fields' has no 'strategy' string"),
    ({"strategy": "test_only", "model": "tinycnn", "knob": True}, "neither a string nor a number"),
])
def test_malformed_fields_are_refused_naming_the_entry(tmp_path, fields, problem):
    data = document()
    data["benchmarks"][0]["fields"] = fields
    with pytest.raises(ResultsError, match=re.escape(problem)) as error:
        pr.load([write(tmp_path, "bad.json", data)])
    assert "benchmarks[0]" in str(error.value)


def test_the_report_shows_the_plugin_strategy_with_its_option(tmp_path):
    out_dir = tmp_path / "report"
    result = run(MAKE_REPORT, out_dir, [FIXTURE])
    assert result.returncode == 0, result.stderr
    report = (out_dir / "REPORT.md").read_text(encoding="utf-8")
    summary = tables(report, "Summary")[SETUP]
    assert [r["strategy"] for r in summary] == ["single", "test_only", "pipeline"]
    plugin = row(summary, "test_only", "knob fast")
    assert plugin["images/s (median)"] == f"{8 * 1000 / 12.2:,.1f}"
    assert plugin["speedup vs single"] == f"{10.2 / 12.2:.2f}\u00d7"
    assert "`test_only` (1 CPU device, knob fast)" in report


def gate(tmp_path, baseline, candidate):
    report_path = tmp_path / "gate.json"
    code = perf_gate.main([write(tmp_path, "baseline.json", baseline), write(tmp_path, "candidate.json", candidate),
                           "--json-out", str(report_path)])
    return code, {row["name"]: row["verdict"] for row in json.loads(report_path.read_text())["benchmarks"]}


def test_the_gate_passes_an_identical_run_and_flags_the_plugin_case_slowing_down(tmp_path):
    code, verdicts = gate(tmp_path, document(), document())
    assert code == 0
    assert verdicts == {SINGLE: "pass", TEST_ONLY: "pass", PIPELINE: "pass"}
    slower = document()
    for entry in slower["benchmarks"]:
        if entry["run_name"].startswith(TEST_ONLY):
            entry["real_time"] *= 1.3
    code, verdicts = gate(tmp_path, document(), slower)
    assert code == 1
    assert verdicts == {SINGLE: "pass", TEST_ONLY: "REGRESSION", PIPELINE: "pass"}


def test_the_gate_compares_an_old_baseline_with_a_run_that_has_fields(tmp_path):
    code, verdicts = gate(tmp_path, before_fields(document()), document())
    assert code == 0
    assert set(verdicts.values()) == {"pass"}
