"""Facts as data (docs/JSON.md, schema 1.8.0): the context's counter table and schedule facts,
read by the gate, the report and the plots, and the compatibility tables for older files."""
from __future__ import annotations

import copy
import json
import os
import subprocess

import pytest

from parbench_results import cases as pr
from parbench_results import facts
from parbench_results import perf_gate
from test_perf_gate import BASELINE_SAMPLES, SINGLE, benchmark_json, gate, gate_report, scaled, verdicts


def counter_row(name, unit="", better="neither", per="case"):
    suffix = {"case": "", "device": "_dev<i>", "rank": "_rank<r>", "stage": "_stage<s>"}[per]
    return {"name": name, "key": name + suffix, "unit": unit, "better": better, "per": per, "meaning": ""}


def with_table(document, rows):
    """The document as schema 1.8.0 writes it: its context with a counter table of `rows`."""
    document = copy.deepcopy(document)
    document["context"]["parbench_json_schema"] = "1.8.0"
    document["context"]["counters"] = json.dumps(rows)
    return document


def with_counter(document, name, values):
    """Every repetition of SINGLE gets counter `name`, the next of `values` in turn."""
    document = copy.deepcopy(document)
    repetitions = [entry for entry in document["benchmarks"]
                   if entry["run_name"] == SINGLE and entry["run_type"] == "iteration"]
    for entry, value in zip(repetitions, values):
        entry[name] = value
    return document


# The counter table.

def test_the_table_finds_each_key_by_its_scope():
    table = facts.legacy_counter_table()
    assert table.find("step_ms").better == "lower"
    assert table.find("items_per_second").better == "higher"
    assert table.find("peak_mem_gib_dev3").name == "peak_mem_gib"
    assert table.find("host_forward_ms_stage1").per == "stage"
    assert table.find("host_forward_ms").per == "case"
    assert table.find("reduce_ms_rank1").name == "reduce_ms"
    assert table.find("peak_mem_gib") is None
    assert table.find("peak_mem_gib_devx") is None
    assert table.find("no_such_counter") is None


def test_a_context_table_replaces_the_built_in_one():
    table = facts.counter_table({"counters": json.dumps([counter_row("knob_ms", "ms", "lower")])})
    assert table.find("knob_ms").unit == "ms"
    assert table.find("step_ms") is None  # a 1.8.0 file says which counters it has
    assert facts.counter_table({}).find("step_ms") is not None  # an older file: the built-in table


def test_a_malformed_table_is_refused_naming_the_key():
    with pytest.raises(facts.FactsError, match="context 'counters'"):
        facts.counter_table({"counters": "[{\"unit\": \"ms\"}]"})


# The gate's --metric.

def test_metric_outside_the_table_exits_2_with_one_line_listing_the_allowed(tmp_path, capsys):
    run = benchmark_json(BASELINE_SAMPLES)
    assert gate(tmp_path, run, run, "--metric", "cpu_time") == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("perf-gate: --metric cpu_time is not a counter the runs declare; allowed: time, "
                               "items_per_second, ")
    assert "peak_mem_gib_dev<i>" in lines[0] and "world_size" not in lines[0]
    assert captured.out == ""


def test_a_counter_without_a_direction_is_not_a_metric(tmp_path, capsys):
    run = benchmark_json(BASELINE_SAMPLES)
    assert gate(tmp_path, run, run, "--metric", "batch") == 2
    assert "--metric batch is a counter without a better direction; allowed: time" in capsys.readouterr().err


def test_step_ms_of_an_old_file_is_gated_lower_is_better(tmp_path):
    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES),
                               benchmark_json(scaled(BASELINE_SAMPLES, 1.2)), "--metric", "step_ms")
    assert code == 1
    assert verdicts(report)[SINGLE] == "REGRESSION"
    assert report["metric"] == "step_ms" and report["metric_unit"] == "ms"


@pytest.mark.parametrize("better, expected_code, expected_verdict", [("higher", 1, "REGRESSION"),
                                                                     ("lower", 0, "improved")])
def test_a_declared_counter_is_gated_the_way_its_table_says(tmp_path, better, expected_code, expected_verdict):
    """A strategy's own counter, declared in the run's context: the gate knows it only from there."""
    rows = [counter_row("items_per_second", "items/s", "higher"), counter_row("step_ms", "ms", "lower"),
            counter_row("knob_rate", "knobs/s", better)]
    baseline = with_table(with_counter(benchmark_json(BASELINE_SAMPLES), "knob_rate",
                                       [100 + i * 0.1 for i in range(10)]), rows)
    candidate = with_table(with_counter(benchmark_json(BASELINE_SAMPLES), "knob_rate",
                                        [80 + i * 0.1 for i in range(10)]), rows)
    code, report = gate_report(tmp_path, baseline, candidate, "--metric", "knob_rate")
    assert (code, verdicts(report)[SINGLE]) == (expected_code, expected_verdict)
    assert report["metric_unit"] == "knobs/s"
    assert verdicts(report)[[name for name in verdicts(report) if name != SINGLE][0]] == "no metric"


def test_a_counter_the_files_do_not_declare_is_refused(tmp_path, capsys):
    rows = [counter_row("items_per_second", "items/s", "higher")]
    run = with_table(benchmark_json(BASELINE_SAMPLES), rows)
    assert gate(tmp_path, run, run, "--metric", "step_ms") == 2
    assert "allowed: time, items_per_second (" in capsys.readouterr().err


def test_the_default_metrics_read_the_same_with_and_without_a_table(tmp_path):
    baseline, candidate = benchmark_json(BASELINE_SAMPLES), benchmark_json(scaled(BASELINE_SAMPLES, 1.1))
    rows = json.loads(json.dumps([counter_row("items_per_second", "items/s", "higher")]))
    for metric in ("time", "items_per_second"):
        _, old = gate_report(tmp_path, baseline, candidate, "--metric", metric)
        _, new = gate_report(tmp_path, with_table(baseline, rows), with_table(candidate, rows), "--metric", metric)
        assert old["benchmarks"] == new["benchmarks"] and old["metric_unit"] == new["metric_unit"]


# The schedules' facts.

ZB = {"name": "zb-h1", "ideal_bubble": "(S-1)/(3M+S-1)", "ideal_work_per_micro_batch": 3,
      "work_times_chunks": False, "ops": [{"letter": "F", "means": "forward"},
                                          {"letter": "B", "means": "input gradient"},
                                          {"letter": "W", "means": "weight gradients"}]}


def test_schedule_facts_from_the_context_and_for_old_files():
    described = facts.schedule_facts({"schedule_facts": json.dumps([ZB])})
    assert described["zb-h1"].ideal_bubble_fraction(2, 6) == pytest.approx(1 / 19)
    assert described["zb-h1"].splits_backward
    legacy = facts.legacy_schedule_facts()
    assert legacy["zb-h1"] == described["zb-h1"]
    assert legacy["interleaved-1f1b"].ideal_bubble_fraction(2, 6, 2) == pytest.approx(1 / 13)
    assert legacy["gpipe"].ideal_bubble_fraction(2, 6, 2) == pytest.approx(1 / 7)  # chunks only where used
    assert not legacy["1f1b"].splits_backward
    # A schedule no file describes: the plain pipeline's bubble.
    assert facts.schedule(described, "new-schedule").ideal_bubble_fraction(2, 6) == pytest.approx(1 / 7)


def repetitions_only(document):
    """The document without the test helper's aggregates (its run_name is not Google Benchmark's)."""
    document["benchmarks"] = [entry for entry in document["benchmarks"] if entry["run_type"] == "iteration"]
    return document


def test_a_case_takes_its_ideal_bubble_from_its_files_facts(tmp_path):
    """A renamed schedule with zb-h1's facts gets zb-h1's bubble: Python knows it from the facts alone."""
    name = ("train/pipeline/resnet50/batch:12/image:128/precision:fp32/data:device/gpus:2/split:2/"
            "schedule:my-zero")
    document = repetitions_only(benchmark_json({name: [10.0, 10.1, 10.2]}))
    document["context"]["schedule_facts"] = json.dumps([dict(ZB, name="my-zero")])
    path = tmp_path / "run.json"
    path.write_text(json.dumps(document))
    case = next(case for case in pr.load([str(path)]).cases if case.name == name)
    assert case.schedule_facts().ideal_bubble == "(S-1)/(3M+S-1)"
    assert case.ideal_bubble_fraction() == pytest.approx(1 / 19)


def test_the_global_batch_is_the_batch_counter(tmp_path):
    """Weak-scaling ddp's name gives each rank's batch; its `batch` counter the global one."""
    name = ("train/ddp/resnet50/batch:64/image:224/precision:bf16/data:device/gpus:2/bucket_mib:25/overlap:on/"
            "scaling:weak")
    document = repetitions_only(benchmark_json({name: [10.0, 10.1, 10.2]}))
    path = tmp_path / "run.json"
    for batch, expected in ((128, 128), (96, 96), (None, 128)):  # None: a file without the counter
        for entry in document["benchmarks"]:
            entry.pop("batch", None)
            if batch is not None:
                entry["batch"] = batch
        path.write_text(json.dumps(document))
        case = next(case for case in pr.load([str(path)]).cases if case.name == name)
        assert case.global_batch() == expected


# The compatibility tables against what this checkout's parbench declares: they must describe the
# same counters and schedules, or a file before 1.8.0 would read differently from a new one.

BINARY = os.environ.get("PARBENCH_BINARY")


@pytest.mark.skipif(not BINARY, reason="PARBENCH_BINARY names no binary (ctest sets it)")
def test_the_compatibility_tables_equal_what_parbench_declares(tmp_path):
    out = tmp_path / "run.json"
    result = subprocess.run([BINARY, "--preset=cpu", "--models=tinycnn", "--strategies=single", "--batch=2",
                             "--image=16", "--warmup=0", "--repetitions=1", "--iterations=1",
                             f"--benchmark_out={out}", "--benchmark_out_format=json"],
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    context = json.loads(out.read_text())["context"]
    assert context["parbench_json_schema"] == "1.17.0"
    declared = {(fact.name, fact.per): (fact.unit, fact.better) for fact in facts.counter_table(context).facts}
    legacy = {(fact.name, fact.per): (fact.unit, fact.better) for fact in facts.legacy_counter_table().facts}
    # Every counter an old file can hold reads as it did; counters declared since 1.8.0 (--fit's,
    # the strategies added later) are in no old file: they are read from each file's own table.
    assert {key: declared.get(key) for key in legacy} == legacy
    assert facts.schedule_facts(context) == facts.legacy_schedule_facts()
    # The report reads the new file as it read the old ones: its ideal bubble, its global batch.
    case = next(case for case in pr.load([str(out)]).cases if case.ran)
    assert case.global_batch() == 2
