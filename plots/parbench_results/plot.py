"""Draws parbench results (docs/JSON.md) as figures, each as PNG and SVG.

  parbench-plot OUT_DIR RUN1.json [RUN2.json ...]     (or python -m parbench_results.plot ...)

step_time   step time per strategy: median of the step_ms counter over repetitions, whiskers from
            its min to its max (the report's tables give the same numbers); one panel per set-up
            (precision, ...); pipeline at its best split.
split_size  pipeline speedup over single (throughput / single's throughput, median over repetitions)
            against split_size on a log axis, one curve per schedule, each schedule's ideal
            S x (1 - its ideal bubble) (S*M/(M+S-1) for tutorial, gpipe and 1f1b; bubbles of
            (S-1)/(vM+S-1) and (S-1)/(3M+S-1) for interleaved-1f1b and zb-h1) and single's 1.0 as
            references, the best split (lowest median step time) marked. Cases with a CUDA graph
            are drawn against single with one, dashed, in the same panel.
split_tradeoff  per set-up with a split sweep: median step time (whiskers min-max) and the
            fullest device's peak allocated GiB against split_size, one line per schedule,
            single's as dashed references: the trade-off a split makes.
throughput  throughput (median, standard deviation) per strategy against the ideal, gpus x single's
            throughput; scaling efficiency = throughput / ideal beside each bar. Throughput is
            images/s (items_per_second) for image models, tokens/s (tokens_per_second) for
            language models, whose items_per_second counts sequences.
memory      peak allocated GiB per device: the highest peak_mem_gib_dev<i> over repetitions.
time_memory the choice between time and memory: per set-up, each case that ran (every split, every
            option) as one point, its throughput (median) against its peak allocated GiB on its
            fullest device, a marker per strategy; the cases no other case beats on both (less
            memory and more throughput) joined as the frontier.
prediction  --advise runs: each case's median step_ms against its median predicted_step_ms.
memory_prediction  --advise runs on GPUs: each case's fullest device's peak, measured (highest
            peak_mem_gib_dev<i>) against predicted (median predicted_peak_gib_dev<i>).
allreduce   comm/allreduce cases: median busbw_gbps against the message size, one line per rank
            count.
scaling     only for a run at several device counts (parbench --gpus=LIST): per set-up, throughput
            and scaling efficiency against the GPU count, one line per strategy (ddp weak and
            strong apart) through its best case at each count (highest median throughput), single
            at 1 and the ideal, gpus x single's throughput (efficiency 100%).

A strategy, schedule or device has one colour in every figure (parbench_results.styles); a
figure's legend sits right of its top panel, outside every panel and title.
Bars lie horizontal, one row per case, so any number of cases keeps its labels apart. Every
figure names the hardware and the commit of its files (docs/METRICS.md, "Figures").
Missing data (a case that did not run, one repetition, no memory counters) is left out with a
note on stderr and on the figure; a figure without any data is not written. A file that is not
readable parbench output exits with status 2 and one line on stderr, having written nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Annotation
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator
from matplotlib.transforms import offset_copy

from parbench_results import cases as pr
from parbench_results.styles import DEVICE_COLORS, schedule_color, strategy_styles

PROG = "parbench-plot"
FORMATS = ("png", "svg")
# 8.6 in at 100 dpi is about 870 px, a README column: the PNG shows at 100 %, fonts at their size.
FIGURE_WIDTH_IN = 8.6
TITLE_HEIGHT_IN = 0.9
SPLIT_PANEL_HEIGHT_IN = 3.6
BAR_PANEL_HEIGHT_IN = 0.9  # a bar panel's title, legend and axis, before its rows
BAR_ROW_IN = 0.45  # one case's row: room for its two-line label
BAR_HEIGHT = 0.62  # of a row
MEMORY_SLOT_IN = 0.2  # a device's bar and its 8-point text in the memory figure's rows
DPI = 100
STYLE = {
    "font.size": 10,
    "axes.titlesize": 10,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "figure.titlesize": 11,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.hashsalt": "parbench",  # stable SVG ids, so regenerated figures diff cleanly
}
PREDICTION_PANEL_IN = 4.2
# Name fields a bar's label shows (or the panel title has): others are added as "key value".
TICK_FIELDS = {"batch", "image", "seq", "precision", "data", "gpus", "schedule", "split", "overlap",
               "bucket_mib", "scaling", "graph", "replicate"}
# A speedup axis whose values span more than this factor is drawn on a log scale.
LOG_SPEEDUP_RANGE = 4.0
CPU_STAND_IN_NOTE = ("No GPU: multi-device strategies ran on CPU stand-in devices; their numbers show "
                     "the code paths and the harness, not what the strategies achieve on GPUs.")


@dataclass
class Rendered:
    written: list[str] = field(default_factory=list)  # figure names, without extension
    skipped: dict[str, str] = field(default_factory=dict)  # figure name -> why it was not drawn
    # what figures leave out and why -> the figures concerned
    notes: dict[str, list[str]] = field(default_factory=dict)

    def note_lines(self) -> list[str]:
        return ([f"{', '.join(figures)}: {note}" for note, figures in self.notes.items()]
                + [f"{name}: {reason}; figure not written" for name, reason in self.skipped.items()])


def draw_figures(results: pr.Results) -> tuple[dict[str, Figure], Rendered]:
    """Every figure that has data, by name (laid out, not saved), and what they leave out."""
    figures = {}
    rendered = Rendered()
    groups = results.by_setup()
    with rc_context(STYLE):
        for name, draw in FIGURES.items():
            notes: list[tuple[pr.Setup | None, str]] = []
            figure = draw(results, groups, notes)
            for setup, text in notes:
                if setup is not None:
                    rendered.notes.setdefault(f"{setup.describe()}: {text}", []).append(name)
            if figure is None:
                if name not in OPTIONAL_FIGURES:
                    rendered.skipped[name] = "; ".join(text for setup, text in notes if setup is None)
                continue
            _fit_texts(figure)
            figures[name] = figure
    return figures, rendered


def render_figures(results: pr.Results, out_dir: Path) -> Rendered:
    """Writes every figure that has data into out_dir."""
    figures, rendered = draw_figures(results)
    with rc_context(STYLE):
        for name, figure in figures.items():
            for extension in FORMATS:
                figure.savefig(out_dir / f"{name}.{extension}", dpi=DPI, bbox_inches="tight",
                               metadata={"Date": None} if extension == "svg" else None)
            rendered.written.append(name)
    return rendered


def remove_stale_figures(out_dir: Path, written: list[str]) -> list[str]:
    """Deletes this tool's figures in out_dir that this run did not draw, so none is mistaken
    for this run's; returns notes on what went."""
    notes = []
    for name in FIGURES:
        for extension in FORMATS:
            path = out_dir / f"{name}.{extension}"
            if name not in written and path.exists():
                path.unlink()
                notes.append(f"{name}: removed {path}, left from an earlier run")
    return notes


# Each _draw_* returns a figure and appends (set-up, text) to notes for what it leaves out; or,
# where there is nothing to draw, returns None and appends (None, why).

@dataclass(frozen=True)
class StepTimeBar:
    """One case's bar in the step_time figure: the median step time over its repetitions, as the
    report's tables give it, and whiskers from the fastest repetition to the slowest (the
    tables' min\u2013max); no whiskers with one repetition."""

    case: pr.Case
    median_ms: float
    min_ms: float
    max_ms: float
    repetitions: int

    @classmethod
    def of(cls, case: pr.Case) -> StepTimeBar:
        stats = case.stats("step_ms")
        return cls(case, stats.median, stats.minimum, stats.maximum, stats.count)

    @property
    def whiskers(self) -> tuple[float, float] | None:
        """(below, above) the median, or None with one repetition."""
        return (self.median_ms - self.min_ms, self.max_ms - self.median_ms) if self.repetitions > 1 else None


def step_time_bars(groups: dict[pr.Setup, list[pr.Case]]) -> dict[pr.Setup, list[StepTimeBar]]:
    """Set-up -> the step_time figure's bars, one per headline case (pipeline at its best split)."""
    return {setup: [StepTimeBar.of(case) for case in pr.headline_cases(cases)]
            for setup, cases in groups.items() if pr.headline_cases(cases)}


def _draw_step_time(results, groups, notes):
    panels = _headline_panels(groups, notes)
    if not panels:
        return None
    bars = step_time_bars(groups)
    figure, axes, titles = _figure(results, "Training step time per strategy", panels, _bar_heights(panels))
    for ax, (setup, shown) in zip(axes, panels.items()):
        drawn = bars[setup]
        _bars(ax, shown, [bar.median_ms for bar in drawn], [bar.whiskers for bar in drawn], "{:,.1f} ms",
              _styles(results))
        _note_one_repetition(setup, shown, [case.stats("step_ms") for case in shown], notes)
        ax.set_xlabel("step time (ms, median)")
    _footer(figure, "Bars: median step time over repetitions, as REPORT.md's tables give it; whiskers: "
                    "min\u2013max, the fastest and the slowest repetition; pipeline at its best split "
                    "(lowest median step time).", notes, titles)
    return figure


def _draw_split_size(results, groups, notes):
    """One panel per set-up apart from the CUDA graph: eager curves against eager single, graph
    curves against single with a graph."""
    panels: dict[pr.Setup, list[tuple[pr.Setup, list[pr.Case], pr.Case]]] = {}
    for setup, cases in groups.items():
        pipeline = [case for case in cases if case.pipelined and case.ran]
        if not pipeline:
            continue
        single = pr.single_reference(cases)
        if single is None:
            notes.append((setup, "no single case ran, so no speedup: its pipeline cases are not drawn"))
            continue
        panels.setdefault(dataclasses.replace(setup, graph="off"), []).append((setup, pipeline, single))
    if not panels:
        ran = any(case.pipelined and case.ran for cases in groups.values() for case in cases)
        notes.append((None, "no pipeline case ran beside a single case" if ran else "no pipeline case ran"))
        return None
    figure, axes, titles = _figure(results, "Pipeline speedup over single against split_size", panels,
                                   [SPLIT_PANEL_HEIGHT_IN] * len(panels))
    for ax, modes in zip(axes, panels.values()):
        speedups = [1.0]
        for setup, pipeline, single in modes:
            speedups += _draw_speedup_curves(ax, setup, pipeline, single, notes)
        speedups += _draw_ideal_speedup(ax, [case for _, pipeline, _ in modes for case in pipeline])
        reference = "single, same mode (eager or CUDA graph)" if len(modes) > 1 else "single"
        ax.axhline(1.0, color="0.35", linestyle="--", linewidth=1.2, label=f"{reference} = 1.0")
        splits = sorted({case.split_size for _, pipeline, _ in modes for case in pipeline})
        ax.set_xscale("log", base=2)
        ax.set_xticks(splits, [str(split) for split in splits])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel(f"split_size ({modes[0][0].samples} per micro-batch, log scale)")
        _speedup_axis(ax, speedups)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, borderaxespad=0.0)
    graphs = any(setup.graph == "on" for modes in panels.values() for setup, _, _ in modes)
    every_case = [case for modes in panels.values() for _, pipeline, _ in modes for case in pipeline]
    unit = throughput_words([setup for modes in panels.values() for setup, _, _ in modes])
    _footer(figure, f"Speedup: the case's median {unit} / single's median {unit} in the same set-up"
                    + (" (dashed: both with --cuda-graph=on)" if graphs else "") + "; error bars: \u00b11 "
                    "sample standard deviation of the case's throughput, in the same units; \u2605 each curve's "
                    "best split (lowest median step time); dotted: each schedule's ideal, S \u00d7 (1 \u2212 its "
                    "ideal bubble), for S balanced devices with free copies and M = \u2308batch/split_size\u2309 "
                    f"micro-batches; ideal bubble: {ideal_formulas(ideal_curves(every_case))} (docs/METRICS.md).",
            notes, titles)
    return figure


def _draw_speedup_curves(ax, setup, pipeline, single, notes) -> list[float]:
    """One curve per pipeline series against single; returns the speedups drawn."""
    graph = setup.graph == "on"
    single_ips = single.stats("items_per_second").median
    drawn = []
    for best in sorted(pr.best_splits(pipeline).values(), key=pr.Case.sort_key):
        points = sorted((case for case in pipeline if case.series == best.series),
                        key=lambda case: case.split_size)
        stats = [case.stats("items_per_second") for case in points]
        speedups = [s.median / single_ips for s in stats]
        best_speedup = speedups[points.index(best)]
        color = schedule_color(best.fields["schedule"])
        name = _series_name(best, pipeline) + (", CUDA graph" if graph else "")
        ax.errorbar([case.split_size for case in points], speedups,
                    yerr=[(s.stddev or 0.0) / single_ips for s in stats], marker="o", markersize=4,
                    capsize=3, color=color, linestyle="--" if graph else "-",
                    label=f"{name}: best split {best.split_size}, {best_speedup:.2f}\u00d7")
        ax.plot([best.split_size], [best_speedup], linestyle="none", marker="*", markersize=15,
                color=color, markeredgecolor="black", zorder=5)
        _note_one_repetition(setup, points, stats, notes)
        drawn += speedups
    return drawn


@dataclass(frozen=True)
class IdealCurve:
    """A dotted ideal in the split_size figure: S x (1 - the schedule's ideal bubble) at each
    split (Case.ideal_speedup, docs/METRICS.md), for the schedules whose ideal it is: those of one
    stage count, batch and chunk count with the same bubble formula draw the same line, once."""

    schedules: tuple[str, ...]
    devices: int
    batch: str
    chunks: int
    bubble: str  # the schedules' ideal bubble, as their facts write it: "(S-1)/(3M+S-1)"
    speedups: dict[int, float]  # split_size -> ideal speedup

    @property
    def color(self) -> str:
        """The schedule's own colour, or black where the line is several schedules'."""
        return schedule_color(self.schedules[0]) if len(self.schedules) == 1 else "black"


def ideal_curves(pipeline: list[pr.Case]) -> list[IdealCurve]:
    """One curve per distinct ideal among the pipeline cases, each schedule in exactly one."""
    found: dict[tuple, dict] = {}
    for case in sorted(pipeline, key=pr.Case.sort_key):
        chunks = int(case.fields.get("chunks", 1))
        key = (case.gpus, case.fields["batch"], chunks, case.schedule_facts().ideal_bubble)
        curve = found.setdefault(key, {"schedules": [], "speedups": {}})
        if case.fields["schedule"] not in curve["schedules"]:
            curve["schedules"].append(case.fields["schedule"])
        curve["speedups"][case.split_size] = case.ideal_speedup()
    return [IdealCurve(tuple(curve["schedules"]), devices, batch, chunks, bubble, dict(sorted(curve["speedups"].items())))
            for (devices, batch, chunks, bubble), curve in found.items()]


def _draw_ideal_speedup(ax, pipeline) -> list[float]:
    """Each schedule's ideal, dotted, in its colour (black where schedules share one); the
    formulas are in the footer (ideal_formulas), once each."""
    curves = ideal_curves(pipeline)
    several_counts = len({(curve.devices, curve.batch) for curve in curves}) > 1
    for curve in curves:
        label = f"ideal, {', '.join(curve.schedules)}"
        if several_counts:
            label += f", {curve.devices} devices, batch {curve.batch}"
        splits = list(curve.speedups)
        ax.plot(splits, list(curve.speedups.values()), color=curve.color, linestyle=":", marker=".", linewidth=1.4,
                label=label)
    return [value for curve in curves for value in curve.speedups.values()]


def ideal_formulas(curves: list[IdealCurve]) -> str:
    """'(S\u22121)/(M+S\u22121) for tutorial, gpipe; (S\u22121)/(2M+S\u22121) for interleaved-1f1b, 2 chunks':
    each schedule's ideal bubble as its facts write it, v replaced by the chunks it ran with."""
    formulas: dict[str, list[str]] = {}
    for curve in curves:
        bubble = curve.bubble.replace("vM", f"{curve.chunks}M") if curve.chunks > 1 else curve.bubble
        bubble = bubble.replace("-", "\u2212")
        names = formulas.setdefault(bubble, [])
        for schedule in curve.schedules:
            name = schedule + (f", {curve.chunks} chunks" if curve.chunks > 1 else "")
            if name not in names:
                names.append(name)
    return "; ".join(f"{bubble} for {', '.join(names)}" for bubble, names in formulas.items())


def _speedup_axis(ax, values):
    """A linear axis from 0, or a log one where the values span more than LOG_SPEEDUP_RANGE."""
    low, high = min(values), max(values)
    if high / low > LOG_SPEEDUP_RANGE:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.set_ylim(low / 1.5, high * 1.5)
        ax.set_ylabel("speedup over single (log scale)")
    else:
        ax.set_ylim(0, high * 1.15)
        ax.set_ylabel("speedup over single")


def _draw_throughput(results, groups, notes):
    panels = _headline_panels(groups, notes)
    if not panels:
        return None
    figure, axes, titles = _figure(results, "Throughput per strategy against ideal scaling", panels,
                                   _bar_heights(panels))
    styles = _styles(results)
    ideal_drawn = False
    for ax, (setup, shown) in zip(axes, panels.items()):
        stats = [case.throughput() for case in shown]
        heights = [s.median for s in stats]
        single = pr.single_reference(groups[setup])
        if single is None:
            notes.append((setup, "no single-GPU case ran, so no ideal and no efficiency"))
            _bars(ax, shown, heights, _symmetric([s.stddev for s in stats]), "{:,.0f}", styles)
        else:
            ideal_drawn = True
            ideal = [case.gpus * single.throughput().median for case in shown]
            ax.barh(range(len(shown)), ideal, height=BAR_HEIGHT, facecolor="none", edgecolor="0.3",
                    linestyle="--", linewidth=1.2, zorder=1)
            texts = [f"{height:,.0f} (reference)" if case is single
                     else f"{height:,.0f}, {pr.scaling_efficiency(case, single):.0%} of ideal"
                     for case, height in zip(shown, heights)]
            _bars(ax, shown, heights, _symmetric([s.stddev for s in stats]), texts, styles, floor=ideal)
        _note_one_repetition(setup, shown, stats, notes)
        ax.set_xlabel(f"throughput ({setup.throughput_unit})")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    if ideal_drawn:
        _legend_beside(axes[0], [Patch(facecolor="0.6", label="measured\n(median)"),
                                 Patch(facecolor="none", edgecolor="0.3", linestyle="--",
                                       label="ideal:\ngpus \u00d7 single")])
    unit = throughput_words(panels)
    _footer(figure, f"Bars: median {unit} over repetitions; error bars: \u00b11 sample standard "
                    f"deviation; efficiency = throughput / (gpus \u00d7 single's throughput).", notes, titles)
    return figure


def throughput_words(setups) -> str:
    """The throughput unit of the set-ups, each once: 'images/s', 'tokens/s', or where both kinds
    of model are drawn 'images/s (tokens/s for language models)'."""
    units = list(dict.fromkeys(setup.throughput_unit for setup in setups))
    if len(units) == 1:
        return units[0]
    return "images/s (tokens/s for language models)"


SCALING_PANEL_IN = 3.2
SCALING_STYLES = {"weak": "-", "strong": "--"}  # a strategy's scaling modes (ddp's)


def _draw_scaling(results, groups, notes):
    """Per set-up of a run at several device counts: throughput (left) and scaling efficiency
    (right) against the GPU count, on a log-2 axis."""
    views = {setup: view for setup, cases in groups.items() if (view := pr.scaling_view(cases))}
    if not views:
        return None  # one count per set-up: no scaling figure, and nothing to say (OPTIONAL_FIGURES)
    figure, grid, titles = _figure(results, "Scaling: throughput and efficiency against the GPU count", views,
                                   [SCALING_PANEL_IN] * len(views), columns=2)
    styles = _styles(results)
    for (setup, view), (left, right) in zip(views.items(), grid):
        counts = sorted({point.gpus for points in view.values() for point in points})
        single = pr.single_reference(groups[setup])
        if single is None:
            notes.append((setup, "no single case ran, so no ideal and no efficiency"))
        else:
            reference = single.throughput().median
            left.plot(counts, [count * reference for count in counts], color="black", linestyle=":",
                      label="ideal: gpus \u00d7 single")
            right.axhline(100, color="black", linestyle=":")
        for line, points in view.items():
            strategy, _, mode = line.partition(" ")
            style = dict(color=styles[strategy][1], linestyle=SCALING_STYLES.get(mode, "-"),
                         marker="o", markersize=5)
            if strategy == "single":  # one point, under the others' 1-GPU points: drawn larger, on top
                style.update(marker="s", markersize=8, zorder=5)
            left.plot([p.gpus for p in points], [p.throughput for p in points], label=line, **style)
            efficient = [p for p in points if p.efficiency is not None]
            if efficient:
                right.plot([p.gpus for p in efficient], [100 * p.efficiency for p in efficient], **style)
        for ax in (left, right):
            ax.set_xscale("log", base=2)
            ax.set_xticks(counts, [str(count) for count in counts])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xlabel("GPUs" if not any(p.case.devices == "cpu" for ps in view.values() for p in ps)
                          else "devices (CPU stand-ins)")
        left.set_ylim(bottom=0)
        left.set_ylabel(f"throughput ({setup.throughput_unit})")
        left.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
        right.set_ylim(bottom=0, top=max([110] + [105 * p.efficiency for ps in view.values() for p in ps
                                                    if p.efficiency is not None]))
        right.set_ylabel("scaling efficiency (%)")
        right.legend(*left.get_legend_handles_labels(), loc="upper left", bbox_to_anchor=(1.01, 1.0),
                     frameon=False, borderaxespad=0.0)
    unit = throughput_words(views)
    _footer(figure, f"Each line: a strategy's best case (highest median {unit}) at each GPU count, ddp's weak "
                    "(solid) and strong (dashed) scaling apart; single is the 1-GPU point. Efficiency = "
                    "throughput / (gpus \u00d7 single's throughput); dotted: the ideal.", notes, titles)
    return figure


def _draw_memory(results, groups, notes):
    panels = {setup: [case for case in pr.headline_cases(cases) if case.peak_memory_gib()]
              for setup, cases in groups.items()}
    panels = {setup: shown for setup, shown in panels.items() if shown}
    if not panels:
        notes.append((None, "no case that ran has peak_mem_gib_dev<i> counters (a CPU run?)"))
        return None
    for setup, cases in groups.items():
        _note_not_run(setup, cases, notes)
        for case in pr.headline_cases(cases):
            if not case.peak_memory_gib():
                notes.append((setup, f"{case.title()} has no memory counters"))
    every_device = sorted({device for shown in panels.values() for case in shown for device in case.peak_memory_gib()})
    # A row holds a bar per device, each with its text: rows grow with the devices so texts keep apart.
    row_in = max(BAR_ROW_IN, MEMORY_SLOT_IN * len(every_device))
    figure, axes, titles = _figure(results, "Peak allocated memory per device", panels,
                                   [BAR_PANEL_HEIGHT_IN + row_in * len(shown) for shown in panels.values()])
    colors = {device: DEVICE_COLORS[device % len(DEVICE_COLORS)] for device in every_device}
    for ax, shown in zip(axes, panels.values()):
        devices = sorted({device for case in shown for device in case.peak_memory_gib()})
        height = BAR_HEIGHT / len(devices)
        for y, case in enumerate(shown):
            peaks = case.peak_memory_gib()
            for slot, (device, peak) in enumerate(peaks.items()):
                position = y + (slot - (len(peaks) - 1) / 2) * height  # centred on the case's row
                ax.barh(position, peak, height=height, color=colors[device])
                ax.annotate(f"{peak:.1f}", (peak, position), xytext=(3, 0), textcoords="offset points",
                            ha="left", va="center", fontsize=8)
        _case_rows(ax, shown)
        ax.set_xlabel("peak allocated (GiB)")
    _legend_beside(axes[0], [Patch(color=color, label=f"device {device}") for device, color in colors.items()])
    _footer(figure, "Peak allocated GiB on each device since the case's set-up, highest over "
                    "repetitions; pipeline at its best split.", notes, titles)
    return figure


TIME_MEMORY_PANEL_IN = 4.0


@dataclass(frozen=True)
class MemoryPoint:
    """One case in the time_memory figure: the peak allocated GiB of its fullest device (what
    decides whether it fits), its median throughput, and whether it is on the frontier: no other
    case of its set-up needs no more memory and trains faster, or needs less and trains as fast."""

    case: pr.Case
    peak_gib: float
    throughput: float
    frontier: bool


def time_memory_points(groups: dict[pr.Setup, list[pr.Case]]) -> dict[pr.Setup, list[MemoryPoint]]:
    """Set-up -> a point per case that ran with memory counters, in the set-up's case order."""
    points = {}
    for setup, cases in groups.items():
        measured = [(case, max(case.peak_memory_gib().values()), case.throughput().median)
                    for case in cases if case.ran and case.peak_memory_gib()]
        if not measured:
            continue
        points[setup] = [MemoryPoint(case, peak, rate, not any(
            (other_peak <= peak and other_rate > rate) or (other_peak < peak and other_rate >= rate)
            for _, other_peak, other_rate in measured)) for case, peak, rate in measured]
    return points


def _styles(results):
    """strategy -> (marker, colour) for every figure of the run (parbench_results.styles): asked
    with all of the run's strategies, so that each keeps its look in every panel and figure."""
    return strategy_styles(case.strategy for case in results.cases if case.family == "train")


def _draw_time_memory(results, groups, notes):
    points = time_memory_points(groups)
    if not points:
        notes.append((None, "no case that ran has peak_mem_gib_dev<i> counters (a CPU run?)"))
        return None
    for setup, cases in groups.items():
        for case in cases:
            if case.ran and not case.peak_memory_gib():
                notes.append((setup, f"{case.title()} has no memory counters"))
    figure, axes, titles = _figure(results, "Throughput against peak memory: the time-memory choice", points,
                                   [TIME_MEMORY_PANEL_IN + 0.2 * sum(p.frontier for p in shown)
                                    for shown in points.values()])
    styles = _styles(results)
    for ax, (setup, shown) in zip(axes, points.items()):
        strategies = list(dict.fromkeys(point.case.strategy for point in shown))
        handles = []
        for strategy in strategies:
            mine = [point for point in shown if point.case.strategy == strategy]
            marker, color = styles[strategy]
            handles.append(ax.scatter([p.peak_gib for p in mine], [p.throughput for p in mine], s=36,
                                      marker=marker, color=color, zorder=3, label=strategy))
        frontier = sorted((p for p in shown if p.frontier), key=lambda p: p.peak_gib)
        handles += ax.plot([p.peak_gib for p in frontier], [p.throughput for p in frontier], color="0.4",
                           linestyle="--", linewidth=1, zorder=2, label="frontier")
        # The frontier's cases numbered beside their points (markers, not texts: close points
        # cannot push labels into each other) and named in the legend, below the panel.
        beside = offset_copy(ax.transData, fig=figure, x=7, y=5, units="points")
        for number, point in enumerate(frontier, start=1):
            ax.scatter([point.peak_gib], [point.throughput], marker=f"${number}$", s=55, color="black",
                       transform=beside, zorder=4)
            handles.append(Line2D([], [], linestyle="none", marker=f"${number}$", color="black", markersize=7,
                                  label=point.case.title()))
        ax.set_xlabel("peak allocated on the fullest device (GiB)")
        ax.set_ylabel(f"throughput ({setup.throughput_unit}, median)")
        # From zero, so that distances read as ratios; room above and right for the numbers.
        ax.set_xlim(0, max(p.peak_gib for p in shown) * 1.1)
        ax.set_ylim(0, max(p.throughput for p in shown) * 1.1)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0, -0.16), ncol=1, fontsize=8, frameon=False)
    _footer(figure, "Each point is one case that ran: its median throughput against the highest peak allocated "
                    "GiB of its devices over repetitions (the device that decides whether it fits). Dashed: "
                    "the frontier, the cases no other case beats on both, numbered and named below each panel.",
            notes, titles)
    return figure


@dataclass(frozen=True)
class PredictionPoint:
    """One case in a prediction figure: what it measured against what --advise predicted."""

    case: pr.Case
    measured: float
    predicted: float


def prediction_points(groups: dict[pr.Setup, list[pr.Case]]) -> dict[pr.Setup, list[PredictionPoint]]:
    """Set-up -> per case that ran with a predicted step time: its median step_ms against its
    median predicted_step_ms (the numbers REPORT.md's prediction table gives)."""
    points = {setup: [PredictionPoint(case, case.stats("step_ms").median, case.stats("predicted_step_ms").median)
                      for case in cases if case.ran and case.stats("predicted_step_ms")]
              for setup, cases in groups.items()}
    return {setup: shown for setup, shown in points.items() if shown}


def memory_prediction_points(groups: dict[pr.Setup, list[pr.Case]]) -> dict[pr.Setup, list[PredictionPoint]]:
    """Set-up -> per case that ran with both peaks: its fullest device's measured peak (highest
    peak_mem_gib_dev<i>) against its predicted one (median predicted_peak_gib_dev<i>), as
    Case.fullest_peaks() and REPORT.md's prediction table give them."""
    points = {}
    for setup, cases in groups.items():
        shown = [PredictionPoint(case, peaks[1], peaks[0]) for case in cases
                 if case.ran and (peaks := case.fullest_peaks()) is not None]
        if shown:
            points[setup] = shown
    return points


PREDICTION_BAND = 0.10  # the grey band: predictions within this fraction of the measurement


def _draw_prediction(results, groups, notes):
    """--advise runs: each case's predicted step time against its measured one."""
    panels = prediction_points(groups)
    if not panels:
        notes.append((None, "no case carries a prediction (runs without --advise)"))
        return None
    figure, axes, titles = _figure(results, "Predicted against measured step time (parbench --advise)",
                                   panels, [PREDICTION_PANEL_IN] * len(panels))
    styles = _styles(results)
    for ax, shown in zip(axes, panels.values()):
        _against(ax, shown, styles)
        recommended = min(shown, key=lambda point: point.case.stats("predicted_rank").median)
        ax.scatter([recommended.measured], [recommended.predicted], s=150, facecolor="none",
                   edgecolor="black", linewidth=1.3, zorder=4, label="_recommended")
        ax.set_xlabel("measured step time (ms, median)")
        ax.set_ylabel("predicted step time (ms)")
    _legend_beside(axes[0], _against_legend(panels, styles) + [
        Line2D([], [], linestyle="none", marker="o", markersize=11, markerfacecolor="none",
               markeredgecolor="black", label="recommended\n(predicted fastest)")])
    _footer(figure, "Each point is one case: its median measured step time against the step time "
                    "--advise predicted before running it; dashed: predicted = measured; grey: within "
                    f"\u00b1{PREDICTION_BAND:.0%}; circled: the recommended case (predicted fastest).", notes, titles)
    return figure


def _draw_memory_prediction(results, groups, notes):
    """--advise runs on GPUs: each case's predicted peak memory against its measured one."""
    panels = memory_prediction_points(groups)
    if not panels:
        return None  # OPTIONAL_FIGURES: no GPU peak, or no memory prediction (schema before 1.10.0)
    figure, axes, titles = _figure(results, "Predicted against measured peak memory (parbench --advise)",
                                   panels, [PREDICTION_PANEL_IN] * len(panels))
    styles = _styles(results)
    for ax, shown in zip(axes, panels.values()):
        _against(ax, shown, styles)
        ax.set_xlabel("measured peak allocated, fullest device (GiB)")
        ax.set_ylabel("predicted peak (GiB)")
    _legend_beside(axes[0], _against_legend(panels, styles))
    _footer(figure, "Each point is one case: the peak allocated GiB of its fullest device, measured (the highest "
                    "peak_mem_gib_dev<i> over repetitions) against --advise's prediction before running it "
                    "(predicted_peak_gib_dev<i>); dashed: predicted = measured; grey: within "
                    f"\u00b1{PREDICTION_BAND:.0%}.", notes, titles)
    return figure


def _against(ax, shown, styles):
    """The points of one prediction panel, coloured by strategy, over the line predicted =
    measured and the band around it. Both axes span the same values, from just below the lowest
    to just above the highest, so that the points fill the panel whatever their spread."""
    values = [point.measured for point in shown] + [point.predicted for point in shown]
    low, high = min(values), max(values)
    pad = max((high - low) * 0.08, high * 0.03)
    low, high = max(low - pad, 0.0), high + pad
    reach = [0.0, high * 2]  # the band and the diagonal run past the limits, across the panel
    ax.fill_between(reach, [x * (1 - PREDICTION_BAND) for x in reach], [x * (1 + PREDICTION_BAND) for x in reach],
                    color="0.92", zorder=0, label="_band")
    ax.plot(reach, reach, color="0.4", linestyle="--", linewidth=1, zorder=1, label="_equal")
    for strategy in dict.fromkeys(point.case.strategy for point in shown):
        mine = [point for point in shown if point.case.strategy == strategy]
        marker, color = styles[strategy]
        ax.scatter([p.measured for p in mine], [p.predicted for p in mine], s=30, marker=marker, color=color,
                   zorder=3, label=strategy)
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)


def _against_legend(panels, styles):
    strategies = dict.fromkeys(point.case.strategy for shown in panels.values() for point in shown)
    return ([Line2D([], [], linestyle="none", marker=styles[s][0], color=styles[s][1], label=s) for s in strategies]
            + [Line2D([], [], color="0.4", linestyle="--", linewidth=1, label="predicted =\nmeasured"),
               Patch(facecolor="0.92", label=f"within \u00b1{PREDICTION_BAND:.0%}")])


TRADEOFF_PANEL_IN = 3.2


@dataclass(frozen=True)
class TradeoffPoint:
    """One pipeline case in the split_tradeoff figure: its split, median step time (min and max
    over repetitions for the whiskers) and its fullest device's peak allocated GiB (None on CPUs)."""

    case: pr.Case
    split_size: int
    step_ms: float
    min_ms: float
    max_ms: float
    peak_gib: float | None


def tradeoff_points(groups: dict[pr.Setup, list[pr.Case]]) -> dict[pr.Setup, dict[tuple, list[TradeoffPoint]]]:
    """Set-up -> pipeline series (schedule, devices, ...) -> its cases that ran, by split_size."""
    found: dict[pr.Setup, dict[tuple, list[TradeoffPoint]]] = {}
    for setup, cases in groups.items():
        for case in sorted((c for c in cases if c.pipelined and c.ran), key=lambda c: c.split_size):
            step = case.stats("step_ms")
            peaks = case.peak_memory_gib()
            found.setdefault(setup, {}).setdefault(case.series, []).append(TradeoffPoint(
                case, case.split_size, step.median, step.minimum, step.maximum, max(peaks.values()) if peaks else None))
    return found


def _draw_split_tradeoff(results, groups, notes):
    """Per set-up with a split sweep: step time (left) and the fullest device's peak memory
    (right) against split_size, one line per schedule, single's as the reference: the choice a
    split makes between the bubble (few large micro-batches) and the per-micro-batch cost (many)."""
    # A trade-off needs a sweep: set-ups where no series ran at two splits or more are left out.
    points = {setup: series for setup, series in tradeoff_points(groups).items()
              if any(len(line) > 1 for line in series.values())}
    if not points:
        return None  # OPTIONAL_FIGURES: split_size says why there is no sweep
    # A CPU run measures no peak: its figure is the step-time column alone.
    memory = any(p.peak_gib is not None for series in points.values() for line in series.values() for p in line)
    figure, grid, titles = _figure(results, "Pipeline trade-off: step time and peak memory against split_size"
                                   if memory else "Pipeline trade-off: step time against split_size",
                                   points, [TRADEOFF_PANEL_IN] * len(points), columns=2 if memory else 1)
    for (setup, series), row in zip(points.items(), grid):
        left, right = (row[0], row[1]) if memory else (row, None)
        pipeline = [point.case for line in series.values() for point in line]
        single = pr.single_reference(groups[setup])
        if single is not None:
            left.axhline(single.stats("step_ms").median, color="0.35", linestyle="--", linewidth=1.2, label="single")
            if right is not None and single.peak_memory_gib():
                right.axhline(max(single.peak_memory_gib().values()), color="0.35", linestyle="--", linewidth=1.2)
        for line in series.values():
            first = line[0].case
            style = dict(color=schedule_color(first.fields["schedule"]), marker="o", markersize=4)
            splits = [point.split_size for point in line]
            left.errorbar(splits, [p.step_ms for p in line], yerr=[[p.step_ms - p.min_ms for p in line],
                                                                  [p.max_ms - p.step_ms for p in line]],
                          capsize=3, label=_series_name(first, pipeline), **style)
            measured = [p for p in line if p.peak_gib is not None]
            if right is not None and measured:
                right.plot([p.split_size for p in measured], [p.peak_gib for p in measured], **style)
        every_split = sorted({point.split_size for line in series.values() for point in line})
        for ax in (left, right) if right is not None else (left,):
            ax.set_xscale("log", base=2)
            ax.set_xticks(every_split, [str(split) for split in every_split])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xlabel(f"split_size\n({setup.samples} per micro-batch, log scale)")
        # From zero, so that heights read as ratios; room above the highest point and single's line.
        left.set_ylim(0, max([p.max_ms for line in series.values() for p in line]
                             + ([single.stats("step_ms").median] if single else [])) * 1.1)
        left.set_ylabel("step time (ms, median)")
        if right is None:
            pass
        elif any(p.peak_gib is not None for line in series.values() for p in line):
            right.set_ylabel("peak allocated, fullest device (GiB)")
            right.set_ylim(0, max([p.peak_gib for line in series.values() for p in line if p.peak_gib is not None]
                                  + list((single.peak_memory_gib() if single else {}).values())) * 1.1)
        else:
            notes.append((setup, "no peak memory measured, so no memory panel"))
            right.set_visible(False)
        (right if right is not None and right.get_visible() else left).legend(
            *left.get_legend_handles_labels(), loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False,
            borderaxespad=0.0)
    memory_words = ("; right: the peak allocated GiB of the case's fullest device, highest over repetitions"
                    if memory else "")
    _footer(figure, f"{'Left: m' if memory else 'M'}edian step time over repetitions, whiskers min\u2013max"
                    f"{memory_words}; dashed: single's. A smaller split means more micro-batches per step: a "
                    "smaller ideal bubble, and more per-micro-batch overhead.", notes, titles)
    return figure


ALLREDUCE_PANEL_IN = 3.8


def allreduce_points(results: pr.Results) -> dict[tuple[int, str], list[tuple[float, float]]]:
    """(ranks, backend) -> (bytes, median busbw_gbps over repetitions) per comm/allreduce case that
    ran, by size: the numbers REPORT.md's All-reduce table gives."""
    lines: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for case in results.cases:
        if case.family == "comm" and case.strategy == "allreduce" and case.ran and case.stats("busbw_gbps"):
            key = (int(case.fields["ranks"]), case.label.get("backend", ""))
            lines.setdefault(key, []).append((case.stats("bytes").median, case.stats("busbw_gbps").median))
    return {key: sorted(points) for key, points in sorted(lines.items())}


def _draw_allreduce(results, groups, notes):
    """comm/allreduce cases: bus bandwidth against message size, one line per rank count."""
    lines = allreduce_points(results)
    if not lines:
        return None  # OPTIONAL_FIGURES: a run without --allreduce
    figure = Figure(figsize=(FIGURE_WIDTH_IN, TITLE_HEIGHT_IN + ALLREDUCE_PANEL_IN), layout="constrained")
    ax = figure.subplots()
    figure.suptitle("\n".join(["All-reduce bus bandwidth against message size",
                               textwrap.fill(_machines(results), 100)]))
    for index, ((ranks, backend), points) in enumerate(lines.items()):
        label = f"{ranks} ranks" + (f", {backend}" if backend else "")
        ax.plot([size for size, _ in points], [busbw for _, busbw in points], marker="o", markersize=4,
                color=DEVICE_COLORS[index % len(DEVICE_COLORS)], label=label)
    sizes = sorted({size for points in lines.values() for size, _ in points})
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [binary_size(size, 3) for size in sizes])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_ylim(bottom=0)
    ax.set_xlabel("message size (float32 buffer, log scale)")
    ax.set_ylabel("busbw (GB/s, median)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, borderaxespad=0.0)
    _footer(figure, "busbw = algbw \u00d7 2(n\u22121)/n, algbw = size / time (median over repetitions; "
                    "docs/METRICS.md): the bandwidth each link carries in a ring all-reduce, comparable across "
                    "rank counts.", [], {})
    return figure


def binary_size(size: float, digits: int = 4) -> str:
    """Bytes in binary units: '97.49 MiB' (the report's tables), '97.5 MiB' with 3 digits (ticks)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.{digits}g} {unit}"
    return f"{size:.0f} B"


FIGURES = {"step_time": _draw_step_time, "split_size": _draw_split_size, "split_tradeoff": _draw_split_tradeoff,
           "throughput": _draw_throughput, "memory": _draw_memory, "time_memory": _draw_time_memory,
           "prediction": _draw_prediction, "memory_prediction": _draw_memory_prediction,
           "scaling": _draw_scaling, "allreduce": _draw_allreduce}
# Figures drawn only for some runs: their absence is no note ("scaling": a --gpus=LIST run's;
# split_tradeoff: split_size already says why no sweep is drawn; memory_prediction: a GPU run of
# --advise's memory prediction; allreduce: a run with its comm/allreduce cases).
OPTIONAL_FIGURES = {"scaling", "split_tradeoff", "memory_prediction", "allreduce"}


def _headline_panels(groups, notes):
    """Set-up -> the cases to draw as bars, for the set-ups where any case ran."""
    panels = {}
    for setup, cases in groups.items():
        _note_not_run(setup, cases, notes)
        shown = pr.headline_cases(cases)
        if shown:
            panels[setup] = shown
        else:
            notes.append((setup, "no case ran, so no panel"))
    if not panels:
        notes.append((None, "no training case ran"))
    return panels


def _bar_heights(panels):
    return [BAR_PANEL_HEIGHT_IN + BAR_ROW_IN * len(shown) for shown in panels.values()]


def _figure(results, what, panels, heights, columns=1):
    """A figure with one panel per set-up, stacked, each `heights` inches tall. The title says
    what all panels share and where the files ran (hardware, commit), each panel's title what is
    its own; returns the figure, the axes and set-up -> panel title. With `columns` > 1 each
    set-up has a row of that many panels, and the axes are those rows."""
    parts = [setup.parts() for setup in panels]
    common = {key: value for key, value in parts[0].items()
              if key != "precision" and all(p.get(key) == value for p in parts)}
    figure = Figure(figsize=(FIGURE_WIDTH_IN, TITLE_HEIGHT_IN + sum(heights)), layout="constrained")
    grid = figure.subplots(len(panels), columns, squeeze=False, height_ratios=heights)
    axes = grid[:, 0]
    lines = [what, textwrap.fill(", ".join(common.values()), 100), textwrap.fill(_machines(results), 100)]
    if results.cpu_stand_ins():
        lines.append(textwrap.fill(CPU_STAND_IN_NOTE, 100))
    figure.suptitle("\n".join(lines))
    titles = {}
    for ax, setup, part in zip(axes, panels, parts):
        titles[setup] = ", ".join(value for key, value in part.items() if key not in common)
        ax.set_title(titles[setup], loc="left", fontweight="bold")
    return figure, (axes if columns == 1 else grid), titles


def _machines(results):
    """The hardware and commit of the files, and the timer where it is not device-synchronised."""
    text = results.describe_machines()
    if "host" in results.context_values("timer") and set(results.context_values("gpu_count")) - {"0"}:
        text += " (host-clock timer, no device sync)"
    return text


def _symmetric(stddevs):
    """Error bars of \u00b11 standard deviation, as _bars takes them."""
    return [None if stddev is None else (stddev, stddev) for stddev in stddevs]


def _bars(ax, cases, widths, errors, texts, styles, floor=None):
    """One horizontal bar per case, error bars where there is a spread, and a text after each bar:
    errors, per bar, (below, above) the bar's end or None (one repetition); texts is a format for
    the width or one string per bar; floor, per bar, where the text may start at the earliest."""
    ys = range(len(cases))
    ax.barh(ys, widths, height=BAR_HEIGHT, color=[styles[c.strategy][1] for c in cases],
            zorder=2)
    spread = [(y, width, error) for y, width, error in zip(ys, widths, errors) if error is not None]
    if spread:
        y, width, error = zip(*spread)
        ax.errorbar(width, y, xerr=[[below for below, _ in error], [above for _, above in error]], fmt="none",
                    ecolor="black", capsize=3, zorder=3)
    if isinstance(texts, str):
        texts = [texts.format(width) for width in widths]
    for y, width, error, text in zip(ys, widths, errors, texts):
        end = max(width + (error[1] if error else 0.0), floor[y] if floor else 0.0)
        if error is None:
            text += " (1 repetition)"
        ax.annotate(text, (end, y), xytext=(4, 0), textcoords="offset points", ha="left", va="center",
                    fontsize=9)
    _case_rows(ax, cases)


def _case_rows(ax, cases):
    """The cases' labels on the rows, the first case on top."""
    ax.set_yticks(range(len(cases)), [_tick_label(case) for case in cases])
    ax.set_ylim(len(cases) - 0.5, -0.5)
    ax.tick_params(axis="y", length=0)


def _fit_texts(figure):
    """After layout: widens each bar panel's value axis so the texts after the bars end inside
    it, and leaves out x tick labels that would touch their left neighbour (close split sizes)."""
    figure.draw_without_rendering()
    for ax in figure.axes:
        _fit_bar_texts(ax)
        _thin_x_ticks(ax)


def _fit_bar_texts(ax):
    """A panel w pixels wide fits a text t pixels wide after a bar ending at value v where
    v * w / X + t <= w, so X = v * w / (w - t)."""
    annotations = [text for text in ax.texts if isinstance(text, Annotation)]
    if not annotations or ax.get_xscale() != "linear":
        return
    width = ax.get_window_extent().width
    left, right = ax.get_xlim()
    needed = right
    for annotation in annotations:
        reach = annotation.get_window_extent().x1 - ax.transData.transform((annotation.xy[0], 0))[0]
        value = annotation.xy[0] - left
        needed = max(needed, left + value * width / max(width - reach - 6, 1))
    ax.set_xlim(left, needed)


def _thin_x_ticks(ax):
    labels = [label for label in ax.get_xticklabels() if label.get_text()]
    kept, last_right = [], None
    for label in sorted(labels, key=lambda label: label.get_position()[0]):
        extent = label.get_window_extent()
        if last_right is None or extent.x0 >= last_right + 2:
            kept.append(label)
            last_right = extent.x1
    if len(kept) < len(labels):
        ax.set_xticks([label.get_position()[0] for label in kept], [label.get_text() for label in kept])


def _tick_label(case):
    """A two-line row label: the strategy, then the devices and the fields that tell variants apart."""
    fields = case.fields
    details = []
    if case.strategy != "single":
        details.append(case.device_count())
    if "schedule" in fields:
        details.append(fields["schedule"])
    if "split" in fields:
        details.append(f"best split {fields['split']}")
    if "replicate" in fields:
        details.append(f"replicate: {fields['replicate']}")
    if "overlap" in fields:
        details.append(f"overlap {fields['overlap']}")
    if "bucket_mib" in fields:  # ddp, whose names always carry scaling too
        details.append(f"{fields['bucket_mib']} MiB, {fields['scaling']}")
    details += [f"{key} {value}" for key, value in case.named_fields.items() if key not in TICK_FIELDS]
    return "\n".join([case.strategy, ", ".join(details)]) if details else case.strategy


def _series_name(case, pipeline_cases):
    """A pipeline series' legend entry: its schedule, plus the device count where that varies."""
    name = case.fields["schedule"]
    if len({c.gpus for c in pipeline_cases}) > 1:
        name += f", {case.device_count()}"
    extra = [f"{key} {value}" for key, value in case.series if key not in ("gpus", "schedule", "graph")]
    return ", ".join([name] + extra)


def _legend_beside(ax, handles):
    """One legend for the figure, right of its top panel, outside every panel: above a panel it
    would meet the panel's title, inside it the data. The layout keeps the column beside every
    panel for it, so all panels keep one width."""
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, borderaxespad=0.0,
              ncol=1 if len(handles) <= 8 else 2)


def _note_not_run(setup, cases, notes):
    """One note per reason, naming the cases it kept from running (a strategy's several cases
    by their number; REPORT.md lists each)."""
    by_reason: dict[str, list[pr.Case]] = {}
    for case in cases:
        if not case.ran:
            verb = "skipped" if case.skipped else "did not run"
            by_reason.setdefault(f"{verb}: {'; '.join(case.reasons())}", []).append(case)
    for reason, not_run in by_reason.items():
        by_strategy: dict[str, list[pr.Case]] = {}
        for case in not_run:
            by_strategy.setdefault(case.strategy, []).append(case)
        named = [group[0].title() if len(group) == 1 else f"{strategy} ({len(group)} cases)"
                 for strategy, group in by_strategy.items()]
        notes.append((setup, f"{reason}: {', '.join(named)}"))


def _note_one_repetition(setup, cases, stats, notes):
    for case, stat in zip(cases, stats):
        if stat.count == 1:
            notes.append((setup, f"{case.title()} has 1 repetition, so no spread is drawn"))


def _footer(figure, caption, notes, titles):
    """The caption and notes under the panels, each note under its panel's title; savefig's tight
    bounding box grows to take them in."""
    lines = [caption] + [f"{titles.get(setup, setup.describe())}: {text}" for setup, text in notes]
    wrapped = [textwrap.fill(line, 110, subsequent_indent="  ", break_on_hyphens=False)
               for line in dict.fromkeys(lines)]
    figure.text(0.0, 0.0, "\n".join(wrapped), ha="left", va="top", fontsize=9)


def main(argv: list[str] | None = None) -> int:
    """The parbench-plot command (pyproject.toml); argv defaults to the command line's."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path, help="folder for the figures (created if missing)")
    parser.add_argument("results", nargs="+", help="parbench JSON files (--benchmark_out)")
    args = parser.parse_args(argv)
    try:
        results = pr.load(args.results)
    except pr.ResultsError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    with pr.staged_output(args.out_dir) as staging:
        rendered = render_figures(results, staging)
    notes = results.notes + rendered.note_lines() + remove_stale_figures(args.out_dir, rendered.written)
    for note in notes:
        print(f"{PROG}: note: {note}", file=sys.stderr)
    for name in rendered.written:
        print(f"wrote {args.out_dir / name}.{{{','.join(FORMATS)}}}")
    return 0


if __name__ == "__main__":  # python -m parbench_results.plot
    sys.exit(main())
