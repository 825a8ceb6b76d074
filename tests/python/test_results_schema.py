"""docs/parbench-results.schema.json, the JSON Schema of parbench's output (docs/JSON.md): every
committed run under reports/ (.json and .json.gz) and every parbench fixture validates against
it, and it refuses a file that lacks what docs/JSON.md requires, or that types a value wrongly."""
from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

from scripts import REPO

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (ci/setup.sh installs it)")

SCHEMA_PATH = REPO / "docs" / "parbench-results.schema.json"
FIXTURES = Path(__file__).resolve().with_name("fixtures")
# Fixtures that are not parbench output on purpose (the readers' tests refuse them): the schema
# must refuse them too. malformed.json and empty.json are not JSON at all.
NOT_RESULTS = {"not_parbench.json": "'parbench_json_schema' is a required property",
               "schema_v2.json": "'2.0.0' does not match"}


def load(path: Path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def results_files() -> list[Path]:
    """Every committed file that is Google Benchmark's JSON (a `benchmarks` array beside a
    `context`): parbench's output. Other JSON there (PyTorch baselines, timelines.json, traces,
    predicted timelines, clocks) has other keys and is left out."""
    found = []
    candidates = [*(REPO / "reports").rglob("*.json"), *(REPO / "reports").rglob("*.json.gz"), *FIXTURES.rglob("*.json"), *FIXTURES.rglob("*.json.gz")]
    for path in sorted(candidates):
        if path.name in NOT_RESULTS:
            continue
        try:
            document = load(path)
        except (ValueError, OSError):
            continue  # malformed.json, empty.json: the readers' bad input
        if isinstance(document, dict) and "benchmarks" in document and "context" in document:
            found.append(path)
    return found


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    assert cls is jsonschema.Draft202012Validator
    cls.check_schema(schema)
    return cls(schema)


def problems(validator, document) -> list[str]:
    return [f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
            for error in sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.absolute_path)))]


FILES = results_files()


def test_the_committed_runs_are_many_and_of_every_schema_version():
    versions = {load(path)["context"].get("parbench_json_schema") for path in FILES}
    assert len(FILES) > 50
    assert {"1.0.0", "1.4.0", "1.10.0"} <= versions


@pytest.mark.parametrize("path", FILES, ids=[str(path.relative_to(REPO)) for path in FILES])
def test_every_committed_run_and_fixture_validates(validator, path):
    found = problems(validator, load(path))
    assert not found, "\n".join(found[:10])


@pytest.mark.parametrize("name, message", NOT_RESULTS.items())
def test_the_fixtures_that_are_not_parbench_output_are_refused(validator, name, message):
    found = problems(validator, load(FIXTURES / name))
    assert any(message in line for line in found), found


def a_recent_run() -> dict:
    """The newest committed run of the fixtures' kind: a GPU run of schema 1.10.0 or later."""
    return load(REPO / "tests/python/fixtures/gpu_runs/2xh200_advise_resnet.json.gz")


def first_train_repetition(document) -> dict:
    return next(entry for entry in document["benchmarks"]
                if entry["name"].startswith("train/") and entry["run_type"] == "iteration")


def without(document, where, key):
    changed = copy.deepcopy(document)
    del where(changed)[key]
    return changed


BROKEN = {
    "no schema version": (lambda d: without(d, lambda c: c["context"], "parbench_json_schema"),
                          "'parbench_json_schema' is a required property"),
    "no name": (lambda d: without(d, first_train_repetition, "name"), "'name' is a required property"),
    "no run_name": (lambda d: without(d, first_train_repetition, "run_name"), "'run_name' is a required property"),
    "no real_time": (lambda d: without(d, first_train_repetition, "real_time"), "'real_time' is a required property"),
    "no step_ms on a case that ran": (lambda d: without(d, first_train_repetition, "step_ms"),
                                      "'step_ms' is a required property"),
    "no fields since 1.4.0": (lambda d: without(d, first_train_repetition, "fields"), "'fields' is a required property"),
    "no counter table since 1.8.0": (lambda d: without(d, lambda c: c["context"], "counters"),
                                     "'counters' is a required property"),
    "no benchmarks": (lambda d: without(d, lambda c: c, "benchmarks"), "'benchmarks' is a required property"),
}


@pytest.mark.parametrize("what", BROKEN)
def test_a_file_missing_what_docs_json_requires_is_refused(validator, what):
    document = a_recent_run()
    assert problems(validator, document) == []
    breaks, message = BROKEN[what]
    found = problems(validator, breaks(document))
    assert any(message in line for line in found), found


def test_wrong_types_and_values_are_refused(validator):
    document = a_recent_run()
    entry = first_train_repetition(document)
    cases = [
        (lambda: document["context"].__setitem__("parbench_json_schema", "1.10"), "does not match"),
        (lambda: document["context"].__setitem__("gpu_count", 2), "is not of type 'string'"),
        (lambda: entry.__setitem__("step_ms", "12.5"), "is not of type 'number'"),
        (lambda: entry.__setitem__("busbw_of_my_own", "fast"), "is not of type 'number'"),
        (lambda: entry["fields"].__setitem__("batch", "120"), "is not of type 'integer'"),
        (lambda: entry["fields"].__setitem__("precision", "fp16"), "is not one of"),
        (lambda: entry.__setitem__("run_type", "repetition"), "is not one of"),
        (lambda: entry.__setitem__("name", "bench/single"), "does not match"),
        (lambda: entry.pop("repetition_index"), "'repetition_index' is a required property"),
        (lambda: entry.update(error_occurred=True), "'error_message' is a required property"),
    ]
    original = copy.deepcopy(document)
    for change, message in cases:
        document.clear()
        document.update(copy.deepcopy(original))
        entry = first_train_repetition(document)
        change()
        found = problems(validator, document)
        assert any(message in line for line in found), (message, found)
