"""A distributed strategy registered from one test file (tests/test_only_ranks.cpp: `test_ranks`,
one process per device, with its option `--reduce=each|flat`, a skip rule and two counters of its
own) in a parbench binary built with it: its cases run as ranks on CPU stand-ins, the ranks get
their case as its fields, and the counters its ranks report reach the JSON as docs/JSON.md says:
one every rank reports alike under its own name, as a local strategy's counter, one that differs
per rank."""
import json
import os
import subprocess

import pytest

from parbench_results import perf_gate
from test_plots_report import MAKE_REPORT, slower_beyond_spread, run

BINARY = os.environ.get("PARBENCH_WITH_TEST_STRATEGY")
pytestmark = pytest.mark.skipif(not BINARY, reason="PARBENCH_WITH_TEST_STRATEGY names no binary (ctest sets it)")

SMALL = ["--strategies=test_ranks", "--models=tinycnn", "--image=16", "--warmup=0", "--iterations=2",
         "--allreduce=off"]
PREFIX = "train/test_ranks/tinycnn/batch:2/image:16/precision:fp32/data:device/gpus:2"


def parbench(*arguments):
    # The CPU path: ranks on CPU stand-ins with the store backend, whatever the machine has.
    environment = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    return subprocess.run([BINARY, *arguments], capture_output=True, text=True, check=False, timeout=300,
                          env=environment)


@pytest.fixture(scope="module")
def ranks_run(tmp_path_factory):
    """Both --reduce values, one repetition each, on 2 CPU ranks."""
    out = tmp_path_factory.mktemp("plugin_ranks") / "run.json"
    result = parbench(*SMALL, "--batch=2", "--reduce=each,flat", "--repetitions=1", f"--benchmark_out={out}")
    assert result.returncode == 0, result.stderr
    return json.loads(out.read_text())


def entries_of(run):
    return [entry for entry in run["benchmarks"]
            if entry["run_name"].startswith("train/test_ranks/") and entry["run_type"] == "iteration"]


def test_its_cases_run_as_ranks_named_by_their_option(ranks_run):
    entries = entries_of(ranks_run)
    names = sorted({entry["run_name"] for entry in entries})
    assert names == [f"{PREFIX}/reduce:{reduce}/iterations:2/manual_time" for reduce in ("each", "flat")]
    assert len(entries) == 2
    for entry in entries:
        assert not entry.get("error_occurred"), entry
        assert entry["world_size"] == 2
        assert entry["fields"]["reduce"] == entry["run_name"].split("/reduce:")[1].split("/")[0]
        assert f"reduce={entry['fields']['reduce']}" in entry["label"] and "backend=store" in entry["label"]


def test_a_counter_alike_on_every_rank_arrives_under_its_own_name(ranks_run):
    per_step = {entry["fields"]["reduce"]: entry["allreduces_per_step"] for entry in entries_of(ranks_run)}
    assert per_step["flat"] == 1
    assert per_step["each"] > 1  # one all-reduce per parameter tensor
    for entry in entries_of(ranks_run):
        assert not [name for name in entry if name.startswith("allreduces_per_step_rank")], entry


def test_a_counter_that_differs_between_ranks_arrives_per_rank(ranks_run):
    for entry in entries_of(ranks_run):
        assert "allreduce_ms" not in entry, entry
        assert entry["allreduce_ms_rank0"] > 0 and entry["allreduce_ms_rank1"] > 0, entry
        assert "allreduce_ms_rank2" not in entry


def test_its_skip_rule_applies():
    result = parbench(*SMALL, "--batch=1", "--reduce=flat", "--repetitions=1")
    # Its one case skipped, nothing ran: exit 3, and the last line says so.
    assert result.returncode == 3, result.stderr
    assert result.stderr.splitlines()[-1].startswith("parbench: incomplete (exit status 3): no case ran")
    assert "reduce:flat needs a batch of at least 2" in result.stderr


def test_advise_predicts_it_from_its_own_predictor(tmp_path):
    """Its file declares a predictor (single's step: the test's model of it); --advise ranks its
    cases beside single's and runs them with their predictions as counters."""
    out = tmp_path / "advise.json"
    result = parbench(*SMALL, "--strategies=single,test_ranks", "--batch=2", "--reduce=each,flat", "--repetitions=1",
                      "--advise=all", f"--benchmark_out={out}")
    assert result.returncode == 0, result.stderr
    run = json.loads(out.read_text())
    predictions = {entry["name"]: entry for entry in json.loads(run["context"]["advise_predictions"])}
    assert "train/single/tinycnn/batch:2/image:16/precision:fp32/data:device" in predictions
    # Its set-up (2 ranks) is profiled apart from single's: both its cases are predicted at that
    # profile's whole-model step, the test predictor's model.
    each, flat = (predictions[f"{PREFIX}/reduce:{reduce}"] for reduce in ("each", "flat"))
    assert each["predicted_step_ms"] > 0
    assert each["predicted_step_ms"] == flat["predicted_step_ms"]
    ran = entries_of(run)
    assert ran, "the best predicted case runs"
    for entry in ran:
        assert entry["predicted_step_ms"] == each["predicted_step_ms"], entry


def test_the_gate_judges_its_cases_and_the_report_shows_them(ranks_run, tmp_path):
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(ranks_run))
    slower = slower_beyond_spread(ranks_run["benchmarks"], lambda name: "/reduce:flat" in name)
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps(dict(ranks_run, benchmarks=slower)))
    report = tmp_path / "gate.json"
    assert perf_gate.main([str(baseline), str(candidate), "--json-out", str(report)]) == 1
    verdicts = {entry["name"]: entry["verdict"] for entry in json.loads(report.read_text())["benchmarks"]}
    assert verdicts[f"{PREFIX}/reduce:flat"] == "REGRESSION"
    assert verdicts[f"{PREFIX}/reduce:each"] == "pass"

    made = run(MAKE_REPORT, tmp_path / "report", [baseline])
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "report" / "REPORT.md").read_text(encoding="utf-8")
    assert "test_ranks" in text and "reduce flat" in text and "reduce each" in text
