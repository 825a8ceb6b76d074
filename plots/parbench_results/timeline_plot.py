"""Draws a pipeline case's measured timeline above the schedule simulator's predicted one.

One row per device (and per lane, where a device computed on several streams), device 0 on
top; one bar per action, coloured by kind as in PyTorch's pipelining visualiser and the
zero-bubble paper: F forward (blue), B backward (orange; with zb-h1 the input gradient alone,
teal), W weight gradients (green), U the optimizer step (grey); each bar labelled by its
micro-batch where it is wide enough. With interleaved-1f1b a device's later chunks are hatched.
Both panels share one time axis in ms from the step's start, unless one step is more than 3x
the other (a prediction from a profile taken on a loaded CPU, say): then each has its own and
the predicted panel's title says so. Each row's label gives the device's bubble
(docs/METRICS.md, "Pipeline timelines").
"""
from __future__ import annotations

import textwrap

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from parbench_results import pipeline_timeline as pt
from parbench_results.facts import ScheduleFacts

FIGURE_WIDTH_IN = 8.6  # parbench_results.plot's width: a README column at 100 dpi
TITLE_HEIGHT_IN = 1.1
PANEL_HEIGHT_IN = 0.75  # a panel's title and axis, before its rows
ROW_IN = 0.5
BAR_HEIGHT = 0.72  # of a row
MAX_SHARED_AXIS_RATIO = 3  # predicted and measured steps further apart get an axis each
MIN_LABEL_PX = 9  # a bar narrower than this many pixels per character gets no label
OP_COLORS = {"F": "#2f6fbf", "B": "#f28e2b", "B_input": "#1f9e89", "W": "#4e9a3a", pt.UPDATE_OP: "#a0a0a0"}
OP_NAMES = {"F": "F forward", "B": "B backward", "B_input": "B input gradient", "W": "W weight gradients",
            pt.UPDATE_OP: "U optimizer step"}
DARK_TEXT_OPS = {"B", pt.UPDATE_OP}  # light bars take black labels, the others white


def draw_timeline(title: str, measured: pt.Timeline, predicted: pt.Predicted | None, schedule: ScheduleFacts,
                  ideal_bubble: float, note: str = "") -> Figure:
    """The figure for one case: `title` names the case and where it ran; `schedule` its schedule's
    facts (the context's `schedule_facts`); `note` says what else a reader must know (why there is
    no predicted panel, CPU stand-ins)."""
    input_only = schedule.splits_backward  # its B is the input gradient; W does the rest
    rows_measured = _rows(measured)
    rows_predicted = _rows(predicted.timeline) if predicted else []
    heights = [PANEL_HEIGHT_IN + ROW_IN * len(rows_measured)]
    if predicted:
        heights.append(PANEL_HEIGHT_IN + ROW_IN * len(rows_predicted))
    figure = Figure(figsize=(FIGURE_WIDTH_IN, TITLE_HEIGHT_IN + sum(heights)), layout="constrained")
    axes = figure.subplots(len(heights), 1, squeeze=False, height_ratios=heights)[:, 0]
    # One time axis, unless the steps are so far apart that the shorter would be a sliver.
    ratio = predicted.timeline.step_ms / measured.step_ms if predicted else 1.0
    shared = 1 / MAX_SHARED_AXIS_RATIO <= ratio <= MAX_SHARED_AXIS_RATIO
    end = max(measured.step_ms, predicted.timeline.step_ms) if predicted and shared else measured.step_ms
    lines = [textwrap.fill(title, 100),
             f"each row's label: its device's bubble; the ideal {schedule.ideal_bubble} = {ideal_bubble:.2f}"]
    if note:
        lines.append(textwrap.fill(note, 100))
    figure.suptitle("\n".join(lines))
    source = "GPU kernels" if measured.source == pt.SOURCE_DEVICE else "host ops"
    _panel(axes[0], measured, rows_measured, input_only, end,
           f"measured (from the trace's {source}): step {measured.step_ms:.2f} ms")
    if predicted:
        title = f"predicted by the schedule simulator: step {predicted.timeline.step_ms:.2f} ms"
        if not shared:
            title += f", {ratio:.3g}\u00d7 the measured: on its own time axis"
        _panel(axes[1], predicted.timeline, rows_predicted, input_only,
               end if shared else predicted.timeline.step_ms, title)
    for ax in axes[:-1] if shared else []:
        ax.tick_params(axis="x", labelbottom=False)
    for ax in axes[-1:] if shared else axes:
        ax.set_xlabel("time from the step's first action (ms)")
    kinds = {_kind(span, input_only) for span in measured.spans}
    if predicted:
        kinds |= {_kind(span, input_only) for span in predicted.timeline.spans}
    handles = [Patch(color=OP_COLORS[kind], label=OP_NAMES[kind]) for kind in OP_COLORS if kind in kinds]
    if any(span.stage >= measured.devices for span in measured.spans):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="later chunk"))
    figure.legend(handles=handles, loc="outside lower center", ncol=len(handles), frameon=False,
                  handlelength=1.2, columnspacing=1.2)
    figure.draw_without_rendering()
    for ax in axes:
        _label_bars(ax)
    return figure


def _kind(span: pt.Span, input_only: bool) -> str:
    """The colour key: zb-h1's B (input gradient only) apart from a whole backward."""
    return "B_input" if span.op == "B" and input_only else span.op


def _rows(timeline: pt.Timeline) -> list[tuple[int, int]]:
    return [(device, lane) for device in range(timeline.devices) for lane in range(timeline.lanes.get(device, 1))]


def _panel(ax, timeline: pt.Timeline, rows, input_only: bool, end: float, title: str) -> None:
    row_of = {row: index for index, row in enumerate(rows)}
    for span in timeline.spans:
        y = row_of[(span.device, span.lane)]
        kind = _kind(span, input_only)
        hatch = "//" if span.stage >= timeline.devices else None
        # The tutorial's B* (the loss over every micro-batch) lies under its per-micro-batch
        # backwards; drawn first and paler, it shows where they leave it uncovered.
        whole = span.micro_batch is None and span.op != pt.UPDATE_OP
        bar = ax.barh(y, span.end_ms - span.start_ms, left=span.start_ms, height=BAR_HEIGHT,
                      color=OP_COLORS[kind], alpha=0.45 if whole else 1.0, edgecolor="white",
                      linewidth=0.6, hatch=hatch, zorder=1 if whole else 2)
        text = "" if span.micro_batch is None else str(span.micro_batch)
        bar.patches[0].timeline_label = (text, "black" if kind in DARK_TEXT_OPS else "white")
    labels = []
    for device, lane in rows:
        lanes = timeline.lanes.get(device, 1)
        name = f"device {device}" + (f" lane {lane}" if lanes > 1 else "")
        labels.append(f"{name}\nbubble {timeline.bubble[device]:.2f}" if lane == 0 else name)
    ax.set_yticks(range(len(rows)), labels)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.tick_params(axis="y", length=0)
    ax.set_xlim(0, end * 1.01)
    ax.set_title(title, loc="left", fontweight="bold")
    ax.grid(axis="x", color="0.9", zorder=0)
    ax.set_axisbelow(True)


def _label_bars(ax) -> None:
    """Writes each bar's micro-batch inside it, where the bar is wide enough on the page."""
    for patch in ax.patches:
        text, color = getattr(patch, "timeline_label", ("", "white"))
        if not text:
            continue
        extent = patch.get_window_extent()
        if extent.width < MIN_LABEL_PX * len(text):
            continue
        ax.text(patch.get_x() + patch.get_width() / 2, patch.get_y() + patch.get_height() / 2, text,
                ha="center", va="center", fontsize=8, color=color, zorder=3, clip_on=True)
