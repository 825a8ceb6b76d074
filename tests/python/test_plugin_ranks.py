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
    assert result.returncode == 0, result.stderr
    assert "reduce:flat needs a batch of at least 2" in result.stderr
