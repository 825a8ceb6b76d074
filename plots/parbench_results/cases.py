"""The cases of parbench's JSON output (docs/JSON.md) for the figures (parbench_results.plot) and reports/make_report.py.

What it computes:
- per case (one benchmark run name; repetitions of the same name in several files are pooled):
  median, mean, sample standard deviation, min, max and count of a counter over the case's
  per-repetition entries (`run_type: iteration`). Google Benchmark's aggregate entries are not
  used: a case with one repetition has none, and the report shows min and max too.
- each training case's fields (strategy, model, batch, ..., split, schedule): the entry's
  `fields` object from schema 1.4.0 on, else parsed from a name such as
  `train/pipeline/resnet50/batch:120/.../split:20/schedule:gpipe` (parbench_results.schema). Any
  strategy and any option fields are read; strategies and schedules are ordered as the context
  lists them (1.4.0), else as STRATEGY_ORDER and SCHEDULE_ORDER, unknown ones last.
- each case's set-up (model, batch, image, precision, data) and single-GPU reference, the
  speedup (single's median step time / the case's) and the scaling efficiency
  (throughput / (gpus x single's throughput)), and the best pipeline split (lowest median step time).
- each set-up's scaling view where its multi-device cases ran at several device counts
  (--gpus=LIST): per strategy (ddp weak and strong apart), the case of highest median throughput
  at each count, its ideal (gpus x single's throughput) and scaling efficiency.
- each case's throughput in its set-up's unit: images/s for an image model, tokens/s for a
  language model (a set-up with a seq); items_per_second counts sequences there.
- what each case ran on: CUDA devices, or CPU devices (the label's `devices` fact, else the
  context's `devices`; files older than both ran only single without GPUs). Multi-device cases
  on CPU devices are stand-ins: they show the code paths and the harness, not GPU performance.
- whether a case that did not run was skipped (`skipped: <reason>`) or failed.

A file that cannot be read as parbench output raises ResultsError, whose message names the file.
"""
from __future__ import annotations

import contextlib
import math
import os
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from parbench_results import facts as facts_module
from parbench_results.facts import CounterTable, ScheduleFacts
from parbench_results.schema import (SECONDS_PER_UNIT, ResultsError, case_fields, key_values, listed_order,
                                     name_parts, read_document)

# Orders for files whose context does not list strategies and schedules (before schema 1.4.0).
STRATEGY_ORDER = ("single", "model_parallel", "pipeline", "data_parallel", "ddp")
SCHEDULE_ORDER = ("tutorial", "gpipe", "1f1b", "interleaved-1f1b", "zb-h1")
PRECISION_ORDER = ("fp32", "bf16")

# The set-up's fields beyond the model: every training case has them (a language model seq,
# others image).
_SETUP_KEYS = ("batch", "image", "seq", "precision", "data")
_SAMPLE_KEYS = ("image", "seq")
_WHOLE_NUMBER_KEYS = ("batch", "image", "seq", "gpus", "split")
# Fields the report and the figures read for the strategies they treat apart (the split sweep,
# ddp's per-rank batch): checked on loading, so a file without them fails naming the case.
_FIELDS_READ_FOR = {
    "pipeline": ("gpus", "split", "schedule"),
    "ddp": ("gpus", "bucket_mib", "overlap", "scaling"),
}
_REQUIRED_TRAIN_COUNTERS = ("step_ms", "items_per_second")
_REQUIRED_COMM_COUNTERS = ("real_time", "bytes", "algbw_gbps", "busbw_gbps")
# The memory breakdown's per-device counters (schema 1.6.0; docs/METRICS.md, "Memory"): the
# counter table's per-device counters in these units.
MEMORY_UNITS = ("GiB", "count")
SKIP_PREFIX = "skipped: "  # a case's error_message when it was skipped, not failed (docs/JSON.md)


@dataclass(frozen=True)
class Stats:
    count: int
    median: float
    mean: float
    stddev: float | None  # sample standard deviation; None with one repetition (no spread)
    minimum: float
    maximum: float

    @classmethod
    def of(cls, values: list[float]) -> Stats:
        return cls(
            count=len(values),
            median=statistics.median(values),
            mean=statistics.fmean(values),
            stddev=statistics.stdev(values) if len(values) > 1 else None,
            minimum=min(values),
            maximum=max(values),
        )


@dataclass(frozen=True)
class Setup:
    """What must match for two cases to be compared: the work one training step does."""

    model: str
    batch: int  # the single-GPU batch this set-up compares with (see Case.reference_batch)
    image: int  # 0 for a language model
    precision: str
    data: str
    graph: str = "off"  # "on": each step is a replay of a captured CUDA graph
    seq: int = 0  # a language model's tokens per sequence; 0 for an image model
    # The update and the backward's work: a case with AdamW, or with its blocks recomputed, is
    # compared with single's case that does the same (names leave the defaults out).
    optimizer: str = "sgd"
    checkpoint: str = "off"

    def parts(self) -> dict[str, str]:
        parts = {
            "model": self.model,
            "batch": f"batch {self.batch}",
            "image": f"seq {self.seq}" if self.seq else f"image {self.image}\u00d7{self.image}",
            "precision": self.precision,
            "data": f"data on {self.data}",
        }
        if self.optimizer != "sgd":
            parts["optimizer"] = self.optimizer
        if self.checkpoint != "off":
            parts["checkpoint"] = f"{self.checkpoint} checkpointed"
        if self.graph == "on":
            parts["graph"] = "CUDA graph"
        return parts

    def describe(self) -> str:
        return ", ".join(self.parts().values())

    @property
    def language_model(self) -> bool:
        """A set-up of sequences (it has a seq), not of images."""
        return self.seq > 0

    @property
    def samples(self) -> str:
        """What items_per_second counts: 'sequences' for a language model, else 'images'."""
        return "sequences" if self.language_model else "images"

    @property
    def throughput_unit(self) -> str:
        """The unit the report and the figures give this set-up's throughput in: tokens/s for a
        language model (what users compare GPTs by), images/s for an image model."""
        return "tokens/s" if self.language_model else "images/s"

    def sort_key(self):
        return (self.model, self.batch, self.image, self.seq, _rank(self.precision, PRECISION_ORDER), self.data,
                self.optimizer != "sgd", self.optimizer, self.checkpoint != "off", self.checkpoint, self.graph)


@dataclass(frozen=True)
class Order:
    """The display order of strategies and schedules; names it does not list come after, by name."""

    strategies: tuple = STRATEGY_ORDER
    schedules: tuple = SCHEDULE_ORDER


@dataclass(frozen=True)
class Facts:
    """What the files' contexts say about counters and schedules (parbench_results.facts): schema
    1.8.0's tables, or for older files the compatibility tables."""

    counters: CounterTable = field(default_factory=facts_module.legacy_counter_table)
    schedules: dict = field(default_factory=facts_module.legacy_schedule_facts)

    @staticmethod
    def of(contexts: list) -> "Facts":
        """The facts of several files: the first file's, then what later ones add."""
        if not contexts:
            return Facts()
        counters, schedules = None, {}
        for context in contexts:
            table = facts_module.counter_table(context)
            counters = table if counters is None else counters.merged(table)
            for name, described in facts_module.schedule_facts(context).items():
                schedules.setdefault(name, described)
        return Facts(counters, schedules)


@dataclass
class Case:
    name: str  # Google Benchmark's run_name
    family: str  # first path element: "train", "comm"
    strategy: str
    model: str | None
    fields: dict[str, str]  # beyond strategy and model; numbers as their names write them
    label: dict[str, str]
    name_keys: frozenset = frozenset()  # the fields its name shows: not options at their default
    devices: str = "cuda"  # what it ran on: "cuda" or "cpu"
    order: Order = Order()
    facts: Facts = field(default_factory=Facts)
    files: list[str] = field(default_factory=list)
    repetitions: list[dict] = field(default_factory=list)  # per-repetition entries that ran
    errors: list[str] = field(default_factory=list)  # error_message of each failed repetition

    @property
    def ran(self) -> bool:
        return bool(self.repetitions)

    @property
    def skipped(self) -> bool:
        """Did not run because it was skipped before it started (not a failure)."""
        return not self.ran and bool(self.errors) and all(e.startswith(SKIP_PREFIX) for e in self.errors)

    def reasons(self) -> list[str]:
        """Why its repetitions did not run, each once, without the skip prefix."""
        return list(dict.fromkeys(e.removeprefix(SKIP_PREFIX) for e in self.errors))

    @property
    def gpus(self) -> int:
        """Devices (or ranks) the case used: GPUs, or CPU devices where devices is "cpu"."""
        return int(self.fields.get("gpus", 1))

    @property
    def cpu_stand_in(self) -> bool:
        """A case on several CPU devices: its numbers show the code paths, not GPUs."""
        return self.devices == "cpu" and self.gpus > 1

    def device_count(self) -> str:
        """'2 GPUs', '2 stages on 1 GPU' where --devices had them share GPUs, or on CPU devices
        '2 CPU devices' ('2 CPU ranks' for ddp)."""
        if "placement" in self.label:
            return self.label["placement"]
        if "devices" in self.fields and len(set(self.fields["devices"].split(","))) < self.gpus:
            return f"{self.gpus} devices on {len(set(self.fields['devices'].split(',')))} GPU(s)"
        if self.devices != "cpu":
            return f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}"
        unit = "rank" if self.over_ranks else "device"
        return f"{self.gpus} CPU {unit}{'s' if self.gpus != 1 else ''}"

    @property
    def pipelined(self) -> bool:
        """Whether it runs micro-batches through a pipeline schedule: it has a `schedule`."""
        return "schedule" in self.fields

    @property
    def over_ranks(self) -> bool:
        """Whether it runs as ranks whose batch scales weakly or strongly: it has a `scaling`."""
        return "scaling" in self.fields

    @property
    def split_size(self) -> int | None:
        return int(self.fields["split"]) if "split" in self.fields else None

    @property
    def reference_batch(self) -> int:
        """The batch of the single-GPU case this one compares with: the name's batch, which is
        the global one, but for weak-scaling ddp each rank's (as --batch is): single's either way."""
        return int(self.fields["batch"])

    @property
    def setup(self) -> Setup:
        return Setup(self.model, self.reference_batch, int(self.fields.get("image", 0)),
                     self.fields["precision"], self.fields["data"], self.fields.get("graph", "off"),
                     int(self.fields.get("seq", 0)), self.fields.get("optimizer", "sgd"),
                     self.fields.get("checkpoint", "off"))

    @property
    def named_fields(self) -> dict[str, str]:
        """The fields its name shows. Schema 1.4.0's `fields` also hold options at their default
        (pipeline's lanes 1, graph off), which names leave out: titles and series leave them out
        too, so a case reads and groups the same from either."""
        return {key: value for key, value in self.fields.items() if key in self.name_keys}

    @property
    def series(self) -> tuple:
        """Fields beyond the set-up and the split: pipeline cases with equal series differ only
        in split_size."""
        return tuple(sorted((key, value) for key, value in self.named_fields.items()
                            if key not in _SETUP_KEYS and key != "split"))

    def stats(self, counter: str) -> Stats | None:
        values = [entry[counter] for entry in self.repetitions if counter in entry]
        return Stats.of(values) if values else None

    def throughput(self) -> Stats:
        """Throughput over the repetitions in the set-up's unit (Setup.throughput_unit): images/s
        (items_per_second) for an image model; tokens/s for a language model, its
        tokens_per_second counter, else items_per_second x seq."""
        seq = int(self.fields.get("seq", 0))
        if not seq:
            return self.stats("items_per_second")
        return Stats.of([entry.get("tokens_per_second", entry["items_per_second"] * seq)
                         for entry in self.repetitions])

    def per_device(self, name: str) -> dict[int, list[float]]:
        """Device index -> every repetition's value of the per-device counter `name` (its stem in
        the counter table: "peak_mem_gib" for peak_mem_gib_dev<i>), devices in order."""
        values: dict[int, list[float]] = {}
        for entry in self.repetitions:
            for device, value in self.facts.counters.per_device(entry, name).items():
                values.setdefault(device, []).append(value)
        return dict(sorted(values.items()))

    def peak_memory_gib(self) -> dict[int, float]:
        """Device index -> highest peak_mem_gib_dev<i> over the repetitions (CUDA runs only)."""
        return {device: max(values) for device, values in self.per_device("peak_mem_gib").items()}

    def fullest_peaks(self) -> tuple[float, float] | None:
        """(predicted, measured) peak of the fullest device in GiB: the highest over devices of
        the median predicted_peak_gib_dev<i> (--advise) and of peak_memory_gib(); None where
        either is missing (memory not predicted, or a CPU run, which measures no peak)."""
        predicted = self.per_device("predicted_peak_gib")
        measured = self.peak_memory_gib()
        if not predicted or not measured:
            return None
        return max(Stats.of(values).median for values in predicted.values()), max(measured.values())

    def memory_breakdown(self) -> dict[int, dict[str, float]]:
        """Device index -> memory counter (the table's per-device counters in MEMORY_UNITS:
        "param_mem_gib", ...) -> its highest value over the repetitions; devices without a
        breakdown counter (a run before schema 1.6.0) are left out."""
        breakdown: dict[int, dict[str, float]] = {}
        for fact in self.facts.counters.facts:
            if fact.per != "device" or fact.unit not in MEMORY_UNITS:
                continue
            for device, values in self.per_device(fact.name).items():
                breakdown.setdefault(device, {})[fact.name] = max(values)
        return {device: values for device, values in sorted(breakdown.items())
                if set(values) - {"peak_mem_gib"}}

    def bubble_fractions(self) -> dict[int, float]:
        """Device index -> median bubble_frac_dev<i> over the repetitions (CUDA runs only)."""
        return {device: Stats.of(values).median for device, values in self.per_device("bubble_frac").items()}

    def busy_fractions(self) -> dict[int, float]:
        """Device index -> median busy_frac_dev<i> over the repetitions (CUDA runs only)."""
        return {device: Stats.of(values).median for device, values in self.per_device("busy_frac").items()}

    def global_batch(self) -> int:
        """Samples (images or sequences) per step over every device and rank: the `batch`
        counter; legacy_global_batch() for an entry without it."""
        batch = self.stats("batch")
        return int(batch.median) if batch is not None else legacy_global_batch(self)

    def micro_batches(self) -> int | None:
        """M: the pipeline's micro-batches per step, ceil(batch / split_size)."""
        if self.split_size is None:
            return None
        return -(-int(self.fields["batch"]) // self.split_size)

    def schedule_facts(self) -> ScheduleFacts | None:
        """Its schedule's facts (the context's `schedule_facts`), None for a case without one."""
        if "schedule" not in self.fields:
            return None
        return facts_module.schedule(self.facts.schedules, self.fields["schedule"])

    def ideal_bubble_fraction(self) -> float | None:
        """(S-1)/(wM+S-1) for a pipeline over S devices of M equal micro-batches, w its schedule's
        work per micro-batch (the chunks per device v, or 3 for F, B and W; docs/METRICS.md)."""
        if self.split_size is None:
            return None
        return self.schedule_facts().ideal_bubble_fraction(self.gpus, self.micro_batches(),
                                                           int(self.fields.get("chunks", 1)))

    def ideal_speedup(self) -> float | None:
        """S*M/(M+S-1): a pipeline's speedup over single with balanced stages and free copies
        (docs/METRICS.md), i.e. S x (1 - the ideal bubble)."""
        if self.split_size is None:
            return None
        return self.gpus * (1 - self.ideal_bubble_fraction())

    def config(self) -> str:
        """The case's fields beyond the set-up, as words: '2 GPUs, gpipe, split 20'."""
        words = []
        if self.strategy != "single":
            words.append(self.device_count())
        if "schedule" in self.fields:
            words.append(self.fields["schedule"])
        if "split" in self.fields:
            words.append(f"split {self.fields['split']}")
        if "bucket_mib" in self.fields:
            words.append(f"bucket {self.fields['bucket_mib']} MiB")
        if "overlap" in self.fields:
            words.append(f"overlap {self.fields['overlap']}")
        if "scaling" in self.fields:
            words.append(f"{self.fields['scaling']} scaling")
        if "replicate" in self.fields:
            words.append(f"replicate {self.fields['replicate']}")
        if self.over_ranks:
            batch = int(self.fields["batch"])  # the global batch in strong scaling
            words.append(f"per-rank batch {batch if self.fields.get('scaling') == 'weak' else batch // self.gpus}")
        described = set(_SETUP_KEYS) | {"gpus", "schedule", "split", "bucket_mib", "overlap", "scaling", "graph",
                                         "replicate", "devices", "optimizer", "checkpoint"}  # the set-up names the last two
        words += [f"{key} {value}" for key, value in self.named_fields.items() if key not in described]
        return ", ".join(words)

    def title(self) -> str:
        config = self.config()
        return f"{self.strategy} ({config})" if config else self.strategy

    def sort_key(self):
        # Numbers in the series (bucket sizes, ...) in numeric order: 5 before 25 before 100.
        series = tuple((key, (0, int(value), "") if value.isdigit() else (1, 0, value)) for key, value in self.series)
        return (_rank(self.strategy, self.order.strategies), self.strategy, self.gpus,
                _rank(self.fields.get("schedule", ""), self.order.schedules), self.split_size or 0, series)


@dataclass
class Run:
    """One results file."""

    path: str
    context: dict


@dataclass
class Results:
    runs: list[Run]
    cases: list[Case]  # in the order first seen
    notes: list[str]  # things a reader should know about the input, for stderr

    def train_cases(self) -> list[Case]:
        return [case for case in self.cases if case.family == "train"]

    def by_setup(self) -> dict[Setup, list[Case]]:
        """Training cases per set-up, set-ups and cases in display order."""
        groups: dict[Setup, list[Case]] = {}
        for case in self.train_cases():
            groups.setdefault(case.setup, []).append(case)
        return {setup: sorted(groups[setup], key=Case.sort_key)
                for setup in sorted(groups, key=Setup.sort_key)}

    def context_values(self, key: str) -> list[str]:
        """The distinct values of a context key over the files, in file order."""
        return list(dict.fromkeys(run.context.get(key, "unknown") for run in self.runs))

    def describe_machines(self) -> str:
        """The hardware and the commit of every file, distinct ones once:
        '2× NVIDIA H200, commit 00bd117c0f (dirty)'."""
        return " | ".join(dict.fromkeys(
            f"{describe_hardware(run.context)}, {describe_commit(run.context)}" for run in self.runs))

    def cpu_stand_ins(self) -> list[Case]:
        """Training cases that ran as multi-device strategies on CPU devices."""
        return [case for case in self.train_cases() if case.ran and case.cpu_stand_in]


def describe_gpus(gpu_names: str) -> str:
    """context.gpu_names as '2\u00d7 NVIDIA H100 80GB HBM3', or 'CPU only'."""
    if gpu_names in ("none", "unknown", ""):
        return "CPU only"
    counts: dict[str, int] = {}
    for gpu in gpu_names.split(";"):
        counts[gpu] = counts.get(gpu, 0) + 1
    return " + ".join(f"{count}\u00d7 {gpu}" for gpu, count in counts.items())


def describe_hardware(context: dict) -> str:
    """The GPUs of one file's context or, without any, its CPUs: 'no GPU, 8 CPUs'."""
    gpus = describe_gpus(str(context.get("gpu_names", "unknown")))
    return f"no GPU, {context.get('num_cpus', '?')} CPUs" if gpus == "CPU only" else gpus


def describe_commit(context: dict) -> str:
    """'commit 00bd117c0f', with ' (dirty)' where the working tree had changes."""
    sha = str(context.get("git_sha", "unknown"))
    dirty = " (dirty)" if context.get("git_dirty") == "true" else ""
    return f"commit {sha[:10]}{dirty}"


def case_devices(context: dict, strategy: str) -> str:
    """What a case ran (or was to run) on where its label does not say: the context's `devices`;
    in files before that key, "cpu" for single where no GPU was visible (only single ran then)."""
    if context.get("devices") in ("cuda", "cpu"):
        return context["devices"]
    return "cpu" if str(context.get("gpu_count")) == "0" and strategy == "single" else "cuda"


def single_reference(cases: list[Case]) -> Case | None:
    """The single-GPU case that ran among one set-up's cases."""
    return next((case for case in cases if case.strategy == "single" and case.ran), None)


def speedup(case: Case, single: Case) -> float:
    return single.stats("step_ms").median / case.stats("step_ms").median


def scaling_efficiency(case: Case, single: Case) -> float:
    return case.stats("items_per_second").median / (case.gpus * single.stats("items_per_second").median)


def scaling_line(case: Case) -> str:
    """The line of the scaling view a case is drawn on: its strategy, and for a strategy with a
    `scaling` option (ddp) the mode too: 'ddp weak', 'ddp strong'."""
    return f"{case.strategy} {case.fields['scaling']}" if "scaling" in case.fields else case.strategy


def scaling_counts(cases: list[Case]) -> list[int]:
    """The device counts at which one set-up's multi-device cases (all but single) ran."""
    return sorted({case.gpus for case in cases if case.ran and case.strategy != "single"})


@dataclass(frozen=True)
class ScalingPoint:
    """One line's best case at one device count (docs/METRICS.md, "Scaling")."""

    line: str
    gpus: int
    case: Case
    throughput: float  # its median throughput in the set-up's unit
    ideal: float | None  # gpus x single's median throughput; None without a single case
    efficiency: float | None  # scaling_efficiency(case, single)


def scaling_view(cases: list[Case]) -> dict[str, list[ScalingPoint]]:
    """One set-up's scaling view, empty unless its multi-device cases ran at two counts or more
    (a --gpus=LIST run): per line (scaling_line), in strategy order, its best case at each count,
    the one with the highest median throughput (the best pipeline schedule and split, the best
    ddp bucket), with the ideal and the scaling efficiency against single; single's one point at 1."""
    if len(scaling_counts(cases)) < 2:
        return {}
    single = single_reference(cases)
    best: dict[tuple[str, int], Case] = {}
    for case in cases:
        if not case.ran:
            continue
        key = (scaling_line(case), case.gpus)
        if key not in best or case.throughput().median > best[key].throughput().median:
            best[key] = case
    view: dict[str, list[ScalingPoint]] = {}
    for (line, gpus), case in sorted(best.items(), key=lambda item: (item[1].sort_key()[:2], item[0][0], item[0][1])):
        throughput = case.throughput().median
        ideal = gpus * single.throughput().median if single else None
        view.setdefault(line, []).append(ScalingPoint(line, gpus, case, throughput, ideal,
                                                      scaling_efficiency(case, single) if single else None))
    return view


def best_splits(cases: list[Case]) -> dict[tuple, Case]:
    """Pipeline series -> its case with the lowest median step time."""
    best: dict[tuple, Case] = {}
    for case in cases:
        if case.pipelined and case.ran:
            incumbent = best.get(case.series)
            if incumbent is None or case.stats("step_ms").median < incumbent.stats("step_ms").median:
                best[case.series] = case
    return best


def headline_cases(cases: list[Case]) -> list[Case]:
    """One set-up's cases that ran, pipeline reduced to its best split per series."""
    best = set(map(id, best_splits(cases).values()))
    return [case for case in cases
            if case.ran and (not case.pipelined or id(case) in best)]


def load(paths: list[str]) -> Results:
    """Reads and checks every file before returning, so callers write nothing on a bad one."""
    runs: list[Run] = []
    cases: dict[str, Case] = {}
    notes = []
    seen = set()
    for path in paths:
        if Path(path).resolve() in seen:
            notes.append(f"{path} is given more than once; read once")
            continue
        seen.add(Path(path).resolve())
        document = read_document(path)
        runs.append(Run(path, document["context"]))
        for index, entry in enumerate(document["benchmarks"]):
            _add_entry(cases, path, index, entry, document["context"])
    order = Order(_listed_order(runs, "strategies", STRATEGY_ORDER), _listed_order(runs, "schedules", SCHEDULE_ORDER))
    try:
        facts = Facts.of([run.context for run in runs])
    except facts_module.FactsError as error:
        raise ResultsError(f"{', '.join(run.path for run in runs)}: {error}") from None
    for case in cases.values():
        case.order = order
        case.facts = facts
        if case.family == "train" and not case.repetitions and not case.errors:
            raise ResultsError(f"{case.files[0]}: {case.name} has aggregates but no per-repetition "
                               "entries (written with --benchmark_report_aggregates_only?)")
        if len(case.files) > 1:
            notes.append(f"{case.name} appears in {', '.join(case.files)}; their repetitions are pooled")
    return Results(runs, list(cases.values()), notes)


def _listed_order(runs: list[Run], key: str, built_in: tuple) -> tuple:
    """The files' lists under the context key, in file order, each name once; a file without
    one (before schema 1.4.0) contributes the built-in order."""
    return tuple(dict.fromkeys(name for run in runs for name in listed_order(run.context, key) or built_in))


def _add_entry(cases: dict[str, Case], path: str, index: int, entry, context: dict) -> None:
    where = f"{path}: benchmarks[{index}]"
    if not isinstance(entry, dict):
        raise ResultsError(f"{where} is not an object")
    for key in ("name", "run_name", "run_type"):
        if not isinstance(entry.get(key), str):
            raise ResultsError(f"{where} has no '{key}' string")
    run_type = entry["run_type"]
    if run_type not in ("iteration", "aggregate"):
        raise ResultsError(f"{where} ({entry['name']}): unknown run_type '{run_type}'")
    name = entry["run_name"]
    case = cases.get(name)
    if case is None:
        case = cases[name] = _new_case(entry, where)
        case.devices = case_devices(context, case.strategy)
    if path not in case.files:
        case.files.append(path)
    if run_type == "aggregate":
        return
    if entry.get("error_occurred"):
        case.errors.append(str(entry.get("error_message", "no error_message")))
        return
    required = {"train": _REQUIRED_TRAIN_COUNTERS, "comm": _REQUIRED_COMM_COUNTERS}.get(case.family, ())
    for counter in required:
        value = entry.get(counter)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ResultsError(f"{where} ({name}): counter '{counter}' is missing or not a finite number")
    if case.family == "comm" and entry.get("time_unit") not in SECONDS_PER_UNIT:
        raise ResultsError(f"{where} ({name}): time_unit '{entry.get('time_unit')}' is not one of "
                           f"{', '.join(SECONDS_PER_UNIT)}")
    if not case.label and isinstance(entry.get("label"), str):
        case.label = _parse_label(entry["label"])
        if case.label.get("devices") in ("cuda", "cpu"):
            case.devices = case.label["devices"]
    case.repetitions.append(entry)


def _new_case(entry: dict, where: str) -> Case:
    name = entry["run_name"]
    parts = name_parts(name)
    if len(parts) < 2:
        raise ResultsError(f"{where}: name '{name}' is not family/strategy/...")
    family, strategy = parts[0], parts[1]
    if family == "comm":  # comm/allreduce/bytes:<n>/ranks:<N>: no model or set-up
        fields = _name_fields(parts[2:], name, where)
        for key in ("bytes", "ranks"):
            if not fields.get(key, "").isdigit():
                raise ResultsError(f"{where}: name '{name}' lacks a whole-number {key}:")
        return Case(name=name, family=family, strategy=strategy, model=None, fields=fields, label={},
                    name_keys=frozenset(fields))
    if family != "train":  # others: kept for counting, not summarised
        return Case(name=name, family=family, strategy=strategy, model=None, fields={}, label={})
    try:
        fields = case_fields(entry)
    except ValueError as error:
        raise ResultsError(f"{where}: {error}") from None
    strategy, model = fields.pop("strategy"), fields.pop("model")
    source = f"the 'fields' object of '{name}'" if "fields" in entry else f"name '{name}'"
    missing = [key for key in _SETUP_KEYS + _FIELDS_READ_FOR.get(strategy, ())
               if key not in fields and key not in _SAMPLE_KEYS]
    if not any(key in fields for key in _SAMPLE_KEYS):
        missing.append("image")
    if missing:
        raise ResultsError(f"{where}: {source} lacks {', '.join(key + ':' for key in missing)}")
    for key in _WHOLE_NUMBER_KEYS:
        if key in fields and not fields[key].isdigit():
            raise ResultsError(f"{where}: {source}: {key} '{fields[key]}' is not a whole number")
    name_keys = frozenset(_name_fields(parts[3:], name, where))
    return Case(name=name, family=family, strategy=strategy, model=model, fields=fields, label={},
                name_keys=name_keys)


def _name_fields(parts: list[str], name: str, where: str) -> dict[str, str]:
    try:
        return key_values(parts)
    except ValueError as error:
        raise ResultsError(f"{where}: name '{name}': {error}") from None


def _parse_label(label: str) -> dict[str, str]:
    pairs = (item.partition("=") for item in label.split(";") if item)
    return {key: value for key, _, value in pairs}


def _rank(value: str, order: tuple) -> int:
    return order.index(value) if value in order else len(order)


@contextlib.contextmanager
def staged_output(out_dir: Path):
    """Yields an empty folder inside out_dir to write into. On success its files move into
    out_dir, Markdown last so a report never points at figures not yet there; on an error they
    are deleted, and so is out_dir if this call created it."""
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".staging-") as staging:
            yield Path(staging)
            for path in sorted(Path(staging).iterdir(), key=lambda p: (p.suffix == ".md", p.name)):
                os.replace(path, out_dir / path.name)
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                out_dir.rmdir()
        raise


def legacy_global_batch(case: Case) -> int:
    """Compatibility, for an entry without the `batch` counter: the name's batch, times the ranks
    for weak-scaling ddp, whose name gives each rank's."""
    weak_ddp = case.strategy == "ddp" and case.fields.get("scaling") == "weak"
    return case.reference_batch * (case.gpus if weak_ddp else 1)
