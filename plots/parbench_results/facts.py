"""Facts the JSON's context carries from schema 1.8.0 on (docs/JSON.md), so that readers know no
counter, schedule or strategy by name:

- `counters`: every counter parbench can write, with its unit, which way is better ("higher",
  "lower" or "neither") and what one value describes ("case", "device", "rank" or "stage"),
  declared in C++ (core/counter_table.h);
- `schedule_facts`: each pipeline schedule's ideal bubble and the letters of its actions
  (strategies/pipeline_schedule.h).

Files before 1.8.0 lack them; the compatibility tables below say what those files' counters and
schedules were, and are used for them alone.

Standard library only, and Python 3.7 syntax: the regression gate imports it (docs/PERF_GATE.md).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

SCOPE_SUFFIX = {"device": "_dev", "rank": "_rank", "stage": "_stage"}
_INDEX_NAME = {"device": "<i>", "rank": "<r>", "stage": "<s>"}


class FactsError(ValueError):
    """A context's facts that are not what docs/JSON.md defines."""


@dataclass(frozen=True)
class CounterFact:
    name: str  # the counter, or a per-device/rank/stage counter's stem
    unit: str = ""
    better: str = "neither"  # "higher", "lower", "neither"
    per: str = "case"  # "case", "device", "rank", "stage"
    meaning: str = ""

    @property
    def key(self) -> str:
        """The key as written, with its index as a placeholder: 'peak_mem_gib_dev<i>'."""
        return self.name if self.per == "case" else self.name + SCOPE_SUFFIX[self.per] + _INDEX_NAME[self.per]

    def matches(self, key: str):
        """The index in `key` where this counter writes it (None for a per-case counter's own
        key), False where `key` is not this counter's. A per-case counter also matches its
        `<name>_rank<r>`, as a distributed strategy's ranks report it."""
        if self.per == "case":
            if key == self.name:
                return None
            suffix = SCOPE_SUFFIX["rank"]
        else:
            suffix = SCOPE_SUFFIX[self.per]
        match = re.fullmatch(re.escape(self.name + suffix) + r"(\d+)", key)
        return int(match.group(1)) if match else False


class CounterTable:
    """The counters of one or more files, in their order, looked up by the key an entry writes."""

    def __init__(self, facts):
        self.facts = tuple(facts)

    def find(self, key: str):
        """The declaration `key` (e.g. 'step_ms', 'peak_mem_gib_dev1', 'reduce_ms_rank1')
        belongs to, or None: a per-case counter's exact name first, then the scoped ones."""
        for fact in self.facts:
            if fact.per == "case" and fact.name == key:
                return fact
        for fact in self.facts:
            if fact.matches(key) is not False:
                return fact
        return None

    def get(self, name: str, per: str = "case"):
        return next((fact for fact in self.facts if fact.name == name and fact.per == per), None)

    def per_device(self, entry: dict, name: str) -> dict:
        """Device index -> the entry's value of per-device counter `name` (e.g. 'bubble_frac')."""
        fact = self.get(name, "device")
        if fact is None:
            return {}
        found = {}
        for key, value in entry.items():
            index = fact.matches(key)
            if index is not False and index is not None:
                found[index] = value
        return found

    def keys(self) -> list:
        return [fact.key for fact in self.facts]

    def merged(self, other: "CounterTable") -> "CounterTable":
        """This table, then the other's declarations it lacks (files of different builds)."""
        known = {(fact.name, fact.per) for fact in self.facts}
        return CounterTable(self.facts + tuple(fact for fact in other.facts if (fact.name, fact.per) not in known))


@dataclass(frozen=True)
class ScheduleFacts:
    name: str
    ideal_bubble: str = "(S-1)/(M+S-1)"  # the formula, as the report prints it
    ideal_work_per_micro_batch: int = 1
    work_times_chunks: bool = False
    ops: tuple = (("F", "forward"), ("B", "backward"))  # (letter, meaning)

    def ideal_bubble_fraction(self, devices: int, micro_batches: int, chunks: int = 1) -> float:
        """(S-1)/(wM+S-1), w the schedule's work per micro-batch (times the chunks where it uses
        them): docs/METRICS.md, "The pipeline's ideal bubble"."""
        work = self.ideal_work_per_micro_batch * (chunks if self.work_times_chunks else 1) * micro_batches
        return (devices - 1) / (work + devices - 1)

    def means(self, letter: str) -> str:
        """What the letter's action does in this schedule ('B': 'input gradient' where the
        backward is split), or '' where the schedule has no such action."""
        return next((meaning for op, meaning in self.ops if op == letter), "")

    @property
    def splits_backward(self) -> bool:
        """Whether its B is the input gradient alone, W doing the weights' (zero-bubble)."""
        return self.means("B") == "input gradient"


def _context_array(context: dict, key: str) -> list:
    """The context's `key`, a JSON array written as a string; ValueError where it is not one."""
    text = context[key]
    rows = json.loads(text) if isinstance(text, str) else None
    if not isinstance(rows, list):
        raise ValueError("not a JSON array")
    return rows


def counter_table(context: dict) -> CounterTable:
    """The context's `counters` (schema 1.8.0 on), else the counters of the files before it."""
    if context.get("counters") is None:
        return legacy_counter_table()
    try:
        table = _context_array(context, "counters")
        return CounterTable(CounterFact(str(row["name"]), str(row.get("unit", "")), str(row.get("better", "neither")),
                                        str(row.get("per", "case")), str(row.get("meaning", "")))
                            for row in table)
    except (ValueError, KeyError, TypeError) as error:
        raise FactsError(f"context 'counters' is not the counter table docs/JSON.md defines: {error}") from None


def schedule_facts(context: dict) -> dict:
    """Schedule name -> ScheduleFacts: the context's `schedule_facts` (1.8.0 on), else
    legacy_schedule_facts() for the files before it."""
    if context.get("schedule_facts") is None:
        return legacy_schedule_facts()
    try:
        rows = _context_array(context, "schedule_facts")
        return {row["name"]: ScheduleFacts(row["name"], row["ideal_bubble"], int(row["ideal_work_per_micro_batch"]),
                                           bool(row["work_times_chunks"]),
                                           tuple((op["letter"], op["means"]) for op in row["ops"]))
                for row in rows}
    except (ValueError, KeyError, TypeError) as error:
        raise FactsError(f"context 'schedule_facts' is not what docs/JSON.md defines: {error}") from None


def schedule(facts: dict, name: str) -> ScheduleFacts:
    """The facts of schedule `name`; a schedule no file describes gets the plain pipeline's."""
    return facts.get(name) or ScheduleFacts(name)


# --- Compatibility: files before schema 1.8.0, whose context carries no facts ----------------

def legacy_counter_table() -> CounterTable:
    """The counters parbench wrote up to schema 1.7.0, as core/counter_table.cpp declares them."""
    rows = [
        ("items_per_second", "items/s", "higher", "case"), ("tokens_per_second", "tokens/s", "higher", "case"),
        ("step_ms", "ms", "lower", "case"), ("tflops", "TFLOP/s", "higher", "case"),
        ("mfu", "fraction", "higher", "case"), ("peak_tflops", "TFLOP/s", "neither", "case"),
        ("mfu_gemm", "fraction", "higher", "case"), ("gemm_tflops", "TFLOP/s", "neither", "case"),
        ("params", "parameters", "neither", "case"), ("batch", "items", "neither", "case"),
        ("image", "pixels", "neither", "case"), ("seq", "tokens", "neither", "case"),
        ("gpus", "devices", "neither", "case"), ("predicted_step_ms", "ms", "lower", "case"),
        ("predicted_rank", "rank", "lower", "case"), ("peak_mem_gib", "GiB", "lower", "device"),
        ("busy_frac", "fraction", "higher", "device"), ("bubble_frac", "fraction", "lower", "device"),
        ("param_mem_gib", "GiB", "lower", "device"), ("grad_mem_gib", "GiB", "lower", "device"),
        ("optim_mem_gib", "GiB", "lower", "device"), ("model_state_mem_gib", "GiB", "lower", "device"),
        ("activation_mem_gib", "GiB", "lower", "device"), ("peak_reserved_gib", "GiB", "lower", "device"),
        ("alloc_retries", "count", "lower", "device"), ("ooms", "count", "lower", "device"),
        ("world_size", "ranks", "neither", "case"), ("step_ms_rank_spread", "fraction", "lower", "case"),
        ("iteration_max_over_median", "ratio", "lower", "case"), ("stalled", "flag", "lower", "case"),
        ("sm_clock_mhz", "MHz", "higher", "device"), ("sm_clock_max_mhz", "MHz", "neither", "device"),
        ("power_w", "W", "neither", "device"), ("temperature_c", "degC", "neither", "device"),
        ("throttle_reasons", "bitmask", "neither", "device"), ("throttled", "flag", "lower", "case"),
        ("bytes", "bytes", "neither", "case"), ("algbw_gbps", "GB/s", "higher", "case"),
        ("busbw_gbps", "GB/s", "higher", "case"),
        ("broadcast_ms", "ms", "lower", "case"), ("host_backward_ms", "ms", "lower", "case"),
        ("host_backward_ms", "ms", "lower", "stage"), ("host_forward_ms", "ms", "lower", "case"),
        ("host_forward_ms", "ms", "lower", "stage"), ("host_wait_ms", "ms", "lower", "stage"),
        ("reduce_ms", "ms", "lower", "case"), ("replicate_ms", "ms", "lower", "case"),
        ("split_size", "items", "neither", "case"),
    ]
    return CounterTable(CounterFact(name, unit, better, per) for name, unit, better, per in rows)


def legacy_schedule_facts() -> dict:
    """The schedules of files before schema 1.8.0, which name them but do not describe them."""
    return {
        "tutorial": ScheduleFacts("tutorial", ops=(("F", "forward"), ("B", "backward"),
                                                   ("B", "backward of one loss over every micro-batch"))),
        "gpipe": ScheduleFacts("gpipe"),
        "1f1b": ScheduleFacts("1f1b"),
        "interleaved-1f1b": ScheduleFacts("interleaved-1f1b", "(S-1)/(vM+S-1)", 1, True),
        "zb-h1": ScheduleFacts("zb-h1", "(S-1)/(3M+S-1)", 3, False,
                               (("F", "forward"), ("B", "input gradient"), ("W", "weight gradients"))),
    }
