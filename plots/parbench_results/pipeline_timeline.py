"""A pipeline case's measured timeline, from its `--trace` file, beside the schedule simulator's.

  parbench-timeline TRACE.json [--devices=N]   # prints the spans and bubble
  (or python -m parbench_results.pipeline_timeline ...)

parbench's traces (docs/JSON.md, "Traces") label each schedule action on the host thread that
issues it: "F3 stage0" (micro-batch 3's forward on stage 0), "B3 stage1" (its backward: the
whole backward, or with zb-h1 the input gradient alone), "W3 stage1" (zb-h1's weight
gradients), "B* stage1" (the tutorial's loss over every micro-batch, around its per-micro-batch
backwards) and "optimizer stage1". The work a range did is:
- on GPUs, the kernels, copies and memsets it launched: each device event's `correlation` names
  the CUDA runtime call that launched it (or its `External id` the host op), which runs on the
  range's thread inside the range; events that a nested range launched belong to that range
  (so a send's copy is the send's, not the forward's);
- on CPUs, or in a trace without device events, the host ops (`cpu_op`) the range ran itself,
  which leaves out the time it waited in a mailbox for a neighbour's activation or gradient.
Stage s runs on device s mod D (D devices; interleaved-1f1b puts several stages on a device).

The measured bubble of device d is 1 - busy / step (docs/METRICS.md, "Pipeline timelines"):
busy is the union of the intervals in which device d ran its stages' actions and updates, step
the time from the first action's start on any device to the last update's end.
"""
from __future__ import annotations

import argparse
import bisect
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from parbench_results.facts import ScheduleFacts

PROG = "parbench-timeline"
ACTION = re.compile(r"^(?P<op>[FBW])(?P<micro_batch>\d+|\*) stage(?P<stage>\d+)$")
UPDATE = re.compile(r"^optimizer stage(?P<stage>\d+)$")
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver"}
SOURCE_DEVICE = "GPU kernels"
SOURCE_HOST = "host ops"
UPDATE_OP = "U"  # an optimizer step: drawn and counted busy, not a schedule action


class TimelineError(Exception):
    """A trace or predicted timeline that cannot be read; the message names the file."""


@dataclass(frozen=True)
class Span:
    """One action (or update) of one stage on one device's lane, in ms from the step's start."""

    device: int
    lane: int
    stage: int
    op: str  # F, B, W, or U for an update
    micro_batch: int | None  # None: the tutorial's B* (the loss over every micro-batch), or U
    start_ms: float
    end_ms: float
    # where its work ran (kernels, or host ops), in ms from the step's start; the bar itself
    # runs from the first's start to the last's end
    busy: tuple[tuple[float, float], ...] = ()


@dataclass
class Timeline:
    spans: list[Span]
    devices: int
    source: str  # SOURCE_DEVICE, SOURCE_HOST, or "schedule simulator"
    step_ms: float
    bubble: list[float]  # per device
    lanes: dict[int, int] = field(default_factory=dict)  # device -> lanes drawn


def merged(intervals) -> list[tuple[float, float]]:
    """The union of [start, end) intervals, as disjoint intervals in order."""
    union: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if union and start <= union[-1][1]:
            union[-1] = (union[-1][0], max(union[-1][1], end))
        else:
            union.append((start, end))
    return union


def covered(intervals) -> float:
    """Length of the union of [start, end) intervals."""
    return sum(end - start for start, end in merged(intervals))


def bubble_fractions(spans: list[Span], devices: int) -> tuple[float, list[float]]:
    """The step (first span's start to the last span's end) and, per device, 1 - busy / step."""
    step = max(span.end_ms for span in spans) - min(span.start_ms for span in spans)
    bubble = []
    for device in range(devices):
        busy = covered(interval for span in spans if span.device == device for interval in span.busy)
        bubble.append(1 - busy / step if step > 0 else 0.0)
    return step, bubble


def ideal_bubble(schedule: ScheduleFacts, devices: int, micro_batches: int, chunks: int = 1) -> float:
    """(S-1)/(wM+S-1), w the schedule's work per micro-batch as its facts give it (the context's
    `schedule_facts`; docs/METRICS.md, "The pipeline's ideal bubble")."""
    return schedule.ideal_bubble_fraction(devices, micro_batches, chunks)


def read_trace(path) -> list[dict]:
    """The trace's events; TimelineError where it is not Chrome trace JSON."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise TimelineError(f"{path}: cannot read: {error}") from None
    except json.JSONDecodeError as error:
        raise TimelineError(f"{path}: not valid JSON: {error}") from None
    events = document.get("traceEvents") if isinstance(document, dict) else None
    if not isinstance(events, list):
        raise TimelineError(f"{path}: not a Chrome trace (needs a 'traceEvents' list)")
    return [event for event in events if isinstance(event, dict)]


def _is_labelled(name: str) -> bool:
    return bool(ACTION.match(name) or UPDATE.match(name))


class _Ranges:
    """Every host thread's named ranges (RECORD_USER_SCOPE), to find the innermost one around a
    moment: work a send (nested in a forward) launched is the send's, not the forward's."""

    def __init__(self, events: list[dict]):
        self.by_thread: dict[tuple, list[tuple[float, float, str]]] = {}
        for event in events:
            if event.get("ph") == "X" and event.get("cat") == "user_annotation":
                start = float(event["ts"])
                self.by_thread.setdefault(_thread(event), []).append(
                    (start, start + float(event.get("dur", 0)), str(event.get("name"))))
        for ranges in self.by_thread.values():
            ranges.sort()
        self.starts = {thread: [start for start, _, _ in ranges] for thread, ranges in self.by_thread.items()}
        self.any_labelled = any(_is_labelled(name) for ranges in self.by_thread.values() for _, _, name in ranges)

    def innermost(self, thread: tuple, moment: float) -> tuple[float, float, str] | None:
        """The latest-starting range on `thread` around `moment`, if it is an action or update."""
        ranges = self.by_thread.get(thread)
        if not ranges:
            return None
        index = bisect.bisect_right(self.starts[thread], moment)
        for start, end, name in reversed(ranges[:index]):
            if end >= moment:
                return (start, end, name) if _is_labelled(name) else None
        return None


def _thread(event: dict) -> tuple:
    return (event.get("pid"), event.get("tid"))


def _parse_label(name: str, devices: int):
    """(stage, device, op, micro_batch) of an action or update range."""
    if match := ACTION.match(name):
        stage = int(match["stage"])
        micro_batch = None if match["micro_batch"] == "*" else int(match["micro_batch"])
        return stage, stage % devices, match["op"], micro_batch
    stage = int(UPDATE.match(name)["stage"])
    return stage, stage % devices, UPDATE_OP, None


def measured_timeline(events: list[dict], devices: int, where: str = "trace") -> Timeline:
    """The spans of every labelled action and update, from GPU kernels where the trace has
    them, else from host ops; TimelineError where the trace labels none."""
    ranges = _Ranges(events)
    if not ranges.any_labelled:
        raise TimelineError(f"{where}: no schedule action is labelled (F<m> stage<s>, ...); "
                            "a CUDA-graph replay, for one, runs none of them on the host")
    work = _device_work(events, ranges)
    source = SOURCE_DEVICE
    if not work:
        work = _host_work(events, ranges)
        source = SOURCE_HOST
    if not work:
        raise TimelineError(f"{where}: the labelled actions ran no kernels or host ops")
    origin = min(start for intervals in work.values() for start, _ in intervals)
    lanes_of: dict[int, list] = {}
    for (name, _, lane_key) in work:
        _, device, _, _ = _parse_label(name, devices)
        lanes_of.setdefault(device, [])
        if lane_key not in lanes_of[device]:
            lanes_of[device].append(lane_key)
    for keys in lanes_of.values():
        keys.sort(key=lambda key: (key is None, key))
    spans = []
    for (name, _, lane_key), intervals in work.items():
        stage, device, op, micro_batch = _parse_label(name, devices)
        busy = tuple(((start - origin) / 1000, (end - origin) / 1000) for start, end in merged(intervals))
        spans.append(Span(device, lanes_of[device].index(lane_key), stage, op, micro_batch,
                          min(start for start, _ in busy), max(end for _, end in busy), busy))
    spans.sort(key=lambda span: (span.device, span.lane, span.start_ms))
    step, bubble = bubble_fractions(spans, devices)
    return Timeline(spans, devices, source, step, bubble, {device: len(keys) for device, keys in lanes_of.items()})


def _device_work(events: list[dict], ranges: _Ranges) -> dict[tuple, list[tuple[float, float]]]:
    """(range name, range start, stream) -> intervals of the device events the range launched."""
    launches = {}  # correlation -> the host thread and moment of the launch
    host_ops = {}  # External id -> the same, for the host op around it
    for event in events:
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        if event.get("cat") in LAUNCH_CATEGORIES and "correlation" in args:
            launches[args["correlation"]] = (_thread(event), float(event["ts"]))
        elif event.get("cat") == "cpu_op" and "External id" in args:
            host_ops[args["External id"]] = (_thread(event), float(event["ts"]))
    work: dict[tuple, list[tuple[float, float]]] = {}
    for event in events:
        if event.get("ph") != "X" or event.get("cat") not in DEVICE_CATEGORIES:
            continue
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        # The launch's thread is the range's; where a trace gives the runtime call another
        # thread id than the profiler's ranges, the host op around the launch still leads there.
        launched_at = [moment for moment in (launches.get(args.get("correlation")), host_ops.get(args.get("External id")))
                       if moment is not None]
        around = next((found for found in (ranges.innermost(*moment) for moment in launched_at) if found), None)
        if around is None:
            continue
        start = float(event["ts"])
        key = (around[2], around[0], args.get("stream", event.get("tid")))
        work.setdefault(key, []).append((start, start + float(event.get("dur", 0))))
    return work


def _host_work(events: list[dict], ranges: _Ranges) -> dict[tuple, list[tuple[float, float]]]:
    """(range name, range start, None) -> intervals of the host ops each range ran itself."""
    work: dict[tuple, list[tuple[float, float]]] = {}
    for event in events:
        if event.get("ph") != "X" or event.get("cat") != "cpu_op":
            continue
        start = float(event["ts"])
        around = ranges.innermost(_thread(event), start)
        if around is None:
            continue
        work.setdefault((around[2], around[0], None), []).append((start, start + float(event.get("dur", 0))))
    return work


@dataclass
class Predicted:
    timeline: Timeline
    schedule: str
    micro_batches: int
    chunks: int


def predicted_timeline(path) -> Predicted:
    """The schedule simulator's step beside a trace (`<case>.predicted.json`, docs/JSON.md)."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        devices = int(document["devices"])
        spans = [Span(int(action["device"]), 0, int(action["stage"]), str(action["op"]), int(action["micro_batch"]),
                      float(action["start_ms"]), float(action["end_ms"]),
                      ((float(action["start_ms"]), float(action["end_ms"])),))
                 for action in document["actions"]]
        bubble = [float(value) for value in document["bubble_fraction"]]
        timeline = Timeline(spans, devices, "schedule simulator", float(document["step_ms"]), bubble,
                            {device: 1 for device in range(devices)})
        return Predicted(timeline, str(document["schedule"]), int(document["micro_batches"]),
                         int(document.get("chunks", 1)))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise TimelineError(f"{path}: not a predicted timeline: {error!r}") from None


def predicted_path(trace_path) -> Path:
    """`<case>.predicted.json` beside `<case>.trace.json`."""
    trace_path = Path(trace_path)
    return trace_path.with_name(trace_path.name.removesuffix(".trace.json") + ".predicted.json")


def main(argv: list[str] | None = None) -> int:
    """The parbench-timeline command (pyproject.toml); argv defaults to the command line's."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("trace", help="a pipeline case's <case>.trace.json (parbench --trace)")
    parser.add_argument("--devices", type=int, default=2, help="devices the case ran on (default 2)")
    args = parser.parse_args(argv)
    if args.devices < 1:
        print(f"{PROG}: error: --devices={args.devices}: needs 1 or more", file=sys.stderr)
        return 2
    try:
        timeline = measured_timeline(read_trace(args.trace), args.devices, args.trace)
    except TimelineError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    for span in timeline.spans:
        label = "*" if span.micro_batch is None else span.micro_batch
        print(f"device {span.device} lane {span.lane} {span.op}{label if span.op != UPDATE_OP else ''} "
              f"stage{span.stage}: {span.start_ms:.3f}-{span.end_ms:.3f} ms")
    print(f"step {timeline.step_ms:.3f} ms from {timeline.source}; bubble " +
          ", ".join(f"dev{device} {value:.3f}" for device, value in enumerate(timeline.bubble)))
    return 0


if __name__ == "__main__":  # python -m parbench_results.pipeline_timeline
    sys.exit(main())
