"""PyTorch baselines (benchmarks/pytorch/, docs/JSON.md "PyTorch baselines"): their files read and
checked, and each result matched to the parbench case it measures the same step as.

A result matches a parbench training case that ran when the strategy, the model and every other
field agree (a field one side lacks takes the value that older parbench names leave out:
pipeline's lanes 1, graph off, and for data_parallel replicate clone, the only variant before
schema 1.1.0), the case ran on the same kind of device (cuda or cpu), and its run used the same
timer (the context's `timer`, `event` where absent).

Standard library only.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from .schema import ResultsError, read_text

KNOWN_SCHEMA_MAJOR = 1
SCHEMA_KEY = "pytorch_baseline_schema"
# What a field missing from a parbench name or a baseline's fields means.
IMPLIED_FIELDS = {"lanes": "1", "graph": "off"}
IMPLIED_BY_STRATEGY = {"data_parallel": {"replicate": "clone"}}
# Variants the baseline's name already says (torch.cuda.graph, torch.compile) or the default.
PLAIN_VARIANTS = {"eager", "event", "graph", "compile"}


@dataclass
class Baseline:
    """One result of a baseline file."""

    name: str
    baseline: str  # what ran: "torch.distributed.pipelining", "torch.nn.DataParallel", ...
    strategy: str  # the parbench strategy it corresponds to
    variant: str  # "eager", "graph", "compile", a schedule, "event"/"tutorial" (the tutorial's method)
    fields: dict[str, str]  # beyond strategy and model, as text, as parbench_results.cases.Case.fields
    model: str
    timer: str
    devices: str  # "cuda" or "cpu", from the file's context
    file: str
    step_ms_median: float | None = None
    step_ms: list[float] = field(default_factory=list)
    items_per_second: float | None = None
    mfu: float | None = None
    peak_mem_gib: float | None = None
    error: str | None = None
    details: dict = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        return self.error is None and self.step_ms_median is not None

    def describe(self) -> str:
        """'torch.distributed.pipelining (1f1b)', 'torch.cuda.graph': the variant where the baseline's
        name does not already say it."""
        return self.baseline if self.variant in PLAIN_VARIANTS else f"{self.baseline} ({self.variant})"


def is_baseline_document(path: str) -> bool:
    """Whether the file is a JSON object with a pytorch_baseline_schema key (parbench's files have
    none); False for anything unreadable, which parbench's reader then reports."""
    try:
        document = json.loads(read_text(path))
    except (ResultsError, ValueError, RecursionError):
        return False
    return isinstance(document, dict) and SCHEMA_KEY in document


def read_baselines(path: str) -> list[Baseline]:
    """The file's results; ResultsError (naming the file) for one this reader cannot use."""
    try:
        document = json.loads(read_text(path))  # FILE.json or FILE.json.gz
    except (ValueError, RecursionError) as error:
        raise ResultsError(f"{path}: cannot read as JSON: {error}") from None
    version = document.get(SCHEMA_KEY) if isinstance(document, dict) else None
    if not isinstance(version, str) or not version.split(".")[0].isdigit():
        raise ResultsError(f"{path}: no {SCHEMA_KEY} version: not a PyTorch baseline file")
    if int(version.split(".")[0]) != KNOWN_SCHEMA_MAJOR:
        raise ResultsError(f"{path}: {SCHEMA_KEY} {version} has major version {version.split('.')[0]}; "
                           f"this reader knows major version {KNOWN_SCHEMA_MAJOR}")
    context, results = document.get("context"), document.get("results")
    if not isinstance(context, dict) or not isinstance(results, list):
        raise ResultsError(f"{path}: needs a 'context' object and a 'results' list")
    baselines = []
    for index, entry in enumerate(results):
        try:
            baselines.append(_baseline(entry, context, path))
        except (KeyError, TypeError, ValueError) as error:
            raise ResultsError(f"{path}: results[{index}]: {error}") from None
    return baselines


def _baseline(entry: dict, context: dict, path: str) -> Baseline:
    if not isinstance(entry, dict):
        raise TypeError("not an object")
    fields = entry["fields"]
    if not isinstance(fields, dict) or not isinstance(fields.get("model"), str):
        raise ValueError("'fields' needs a 'model' string")
    as_text = {}
    for key, value in fields.items():
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"fields.{key}: {value!r} is neither a string nor a number")
        as_text[key] = value if isinstance(value, str) else _number_text(value)
    model = as_text.pop("model")
    as_text.pop("strategy", None)
    median = entry.get("step_ms_median")
    if entry.get("error") is None and not isinstance(median, (int, float)):
        raise ValueError("neither an 'error' nor a 'step_ms_median' number")
    return Baseline(name=str(entry["name"]), baseline=str(entry["baseline"]), strategy=str(entry["strategy"]),
                    variant=str(entry.get("variant", "")), fields=as_text, model=model,
                    timer=str(entry.get("timer") or context.get("timer", "event")),
                    devices=str(context.get("devices", "cuda")), file=path,
                    step_ms_median=median, step_ms=list(entry.get("step_ms") or []),
                    items_per_second=entry.get("items_per_second"), mfu=entry.get("mfu"),
                    peak_mem_gib=entry.get("peak_mem_gib"), error=entry.get("error"),
                    details=entry.get("details") or {})


def _number_text(value) -> str:
    """120, not 120.0, as parbench's names and parbench_results.schema write numbers."""
    return str(int(value)) if float(value).is_integer() else repr(value)


def _implied(strategy: str, key: str):
    return IMPLIED_BY_STRATEGY.get(strategy, {}).get(key, IMPLIED_FIELDS.get(key))


def fields_agree(strategy: str, ours: dict, theirs: dict) -> bool:
    for key in set(ours) | set(theirs):
        if ours.get(key, _implied(strategy, key)) != theirs.get(key, _implied(strategy, key)):
            return False
    return True


def match(baselines: list[Baseline], results) -> list[tuple[Baseline, object | None]]:
    """Each baseline with the parbench case (parbench_results.cases.Case) it matches, or None."""
    timers = {run.path: run.context.get("timer", "event") for run in results.runs}
    matched = []
    for baseline in baselines:
        found = None
        if baseline.ran:
            for case in results.train_cases():
                if (case.ran and case.strategy == baseline.strategy and case.model == baseline.model
                        and case.devices == baseline.devices and timers.get(case.files[0], "event") == baseline.timer
                        and fields_agree(case.strategy, case.fields, baseline.fields)):
                    found = case
                    break
        matched.append((baseline, found))
    return matched
