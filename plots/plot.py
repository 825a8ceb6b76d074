"""Draws parbench results (docs/JSON.md) as figures, each as PNG and SVG.

  python3 plots/plot.py OUT_DIR RUN1.json [RUN2.json ...]

step_time   step time per strategy: median of the step_ms counter over repetitions, whiskers from
            its min to its max (the report's tables give the same numbers); one panel per set-up
            (precision, ...); pipeline at its best split.
split_size  pipeline speedup over single (throughput / single's throughput, median over repetitions)
            against split_size on a log axis, one curve per schedule, the ideal S*M/(M+S-1) and
            single's 1.0 as references, the best split (lowest median step time) marked. Cases
            with a CUDA graph are drawn against single with one, dashed, in the same panel.
throughput  throughput (median, standard deviation) per strategy against the ideal, gpus x single's
            throughput; scaling efficiency = throughput / ideal beside each bar. Throughput is
            images/s (items_per_second) for image models, tokens/s (tokens_per_second) for
            language models, whose items_per_second counts sequences.
memory      peak allocated GiB per device: the highest peak_mem_gib_dev<i> over repetitions.
time_memory the choice between time and memory: per set-up, each case that ran (every split, every
            option) as one point, its throughput (median) against its peak allocated GiB on its
            fullest device, a marker per strategy; the cases no other case beats on both (less
            memory and more throughput) joined as the frontier.
scaling     only for a run at several device counts (parbench --gpus=LIST): per set-up, throughput
            and scaling efficiency against the GPU count, one line per strategy (ddp weak and
            strong apart) through its best case at each count (highest median throughput), single
            at 1 and the ideal, gpus x single's throughput (efficiency 100%).

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

FORMATS = ("png", "svg")
# 8.6 in at 100 dpi is about 870 px, a README column: the PNG shows at 100 %, fonts at their size.
FIGURE_WIDTH_IN = 8.6
TITLE_HEIGHT_IN = 0.9
SPLIT_PANEL_HEIGHT_IN = 3.6
BAR_PANEL_HEIGHT_IN = 0.9  # a bar panel's title, legend and axis, before its rows
BAR_ROW_IN = 0.45  # one case's row: room for its two-line label
BAR_HEIGHT = 0.62  # of a row
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
STRATEGY_COLORS = {
    "single": "#4c72b0",
    "model_parallel": "#dd8452",
    "pipeline": "#55a868",
    "data_parallel": "#c44e52",
    "ddp": "#8172b3",
}
OTHER_COLOR = "#937860"
PREDICTION_PANEL_IN = 4.2
# Name fields a bar's label shows (or the panel title has): others are added as "key value".
TICK_FIELDS = {"batch", "image", "seq", "precision", "data", "gpus", "schedule", "split", "overlap",
               "bucket_mib", "scaling", "graph", "replicate"}
SCHEDULE_COLORS = {"tutorial": "#55a868", "gpipe": "#1f77b4", "1f1b": "#d62728", "interleaved-1f1b": "#9467bd",
                   "zb-h1": "#8c564b"}
DEVICE_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
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
        _bars(ax, shown, [bar.median_ms for bar in drawn], [bar.whiskers for bar in drawn], "{:,.1f} ms")
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
    unit = throughput_words([setup for modes in panels.values() for setup, _, _ in modes])
    _footer(figure, f"Speedup: the case's median {unit} / single's median {unit} in the same set-up"
                    + (" (dashed: both with --cuda-graph=on)" if graphs else "") + "; error bars: \u00b11 "
                    "sample standard deviation of the case's throughput, in the same units; \u2605 each curve's "
                    "best split (lowest median step time); dotted: the ideal S\u00b7M/(M+S\u22121) of S "
                    "balanced stages with free copies and M = \u2308batch/split_size\u2309 micro-batches "
                    "(docs/METRICS.md).", notes, titles)
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
        color = SCHEDULE_COLORS.get(best.fields["schedule"], OTHER_COLOR)
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


def _draw_ideal_speedup(ax, pipeline) -> list[float]:
    """The ideal S*M/(M+S-1) at each split, one dotted line per stage count and batch."""
    lines: dict[tuple[int, str], dict[int, float]] = {}
    for case in pipeline:
        lines.setdefault((case.gpus, case.fields["batch"]), {})[case.split_size] = case.ideal_speedup()
    for (stages, batch), ideal in sorted(lines.items()):
        splits = sorted(ideal)
        label = f"ideal, {stages} stages: S\u00b7M/(M+S\u22121)"
        if len(lines) > 1:
            label += f", batch {batch}"
        ax.plot(splits, [ideal[split] for split in splits], color="black", linestyle=":", marker=".",
                label=label)
    return [value for ideal in lines.values() for value in ideal.values()]


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
    for ax, (setup, shown) in zip(axes, panels.items()):
        stats = [case.throughput() for case in shown]
        heights = [s.median for s in stats]
        single = pr.single_reference(groups[setup])
        if single is None:
            notes.append((setup, "no single-GPU case ran, so no ideal and no efficiency"))
            _bars(ax, shown, heights, _symmetric([s.stddev for s in stats]), "{:,.0f}")
        else:
            ideal = [case.gpus * single.throughput().median for case in shown]
            ax.barh(range(len(shown)), ideal, height=BAR_HEIGHT, facecolor="none", edgecolor="0.3",
                    linestyle="--", linewidth=1.2, zorder=1)
            texts = [f"{height:,.0f} (reference)" if case is single
                     else f"{height:,.0f}, {pr.scaling_efficiency(case, single):.0%} of ideal"
                     for case, height in zip(shown, heights)]
            _bars(ax, shown, heights, _symmetric([s.stddev for s in stats]), texts, floor=ideal)
            _legend_above(ax, [Patch(facecolor="0.6", label="measured (median)"),
                               Patch(facecolor="none", edgecolor="0.3", linestyle="--",
                                     label="ideal: gpus \u00d7 single")])
        _note_one_repetition(setup, shown, stats, notes)
        ax.set_xlabel(f"throughput ({setup.throughput_unit})")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
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
            style = dict(color=STRATEGY_COLORS.get(strategy, OTHER_COLOR), linestyle=SCALING_STYLES.get(mode, "-"),
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
    figure, axes, titles = _figure(results, "Peak allocated memory per device", panels, _bar_heights(panels))
    for ax, shown in zip(axes, panels.values()):
        devices = sorted({device for case in shown for device in case.peak_memory_gib()})
        colors = {device: DEVICE_COLORS[device % len(DEVICE_COLORS)] for device in devices}
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
        _legend_above(ax, [Patch(color=color, label=f"device {device}") for device, color in colors.items()])
    _footer(figure, "Peak allocated GiB on each device since the case's set-up, highest over "
                    "repetitions; pipeline at its best split.", notes, titles)
    return figure


STRATEGY_MARKERS = {"single": "o", "model_parallel": "s", "pipeline": "^", "data_parallel": "D", "ddp": "v"}
OTHER_MARKERS = ("P", "X", "*", "h", "<", ">", "p")
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


# Strategies without a colour of their own (plug-ins) take these in turn.
OTHER_COLORS = (OTHER_COLOR, "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd")


def _strategy_styles(strategies):
    """strategy -> (marker, colour) for one figure: given once for all its panels, so that a
    strategy keeps its marker and colour where another is missing from a panel; strategies
    without their own take the next unused in turn, so two plug-ins never share both."""
    other_markers = iter(OTHER_MARKERS * (1 + len(strategies) // len(OTHER_MARKERS)))
    other_colors = iter(OTHER_COLORS * (1 + len(strategies) // len(OTHER_COLORS)))
    return {strategy: (STRATEGY_MARKERS.get(strategy) or next(other_markers),
                       STRATEGY_COLORS.get(strategy) or next(other_colors)) for strategy in strategies}


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
    styles = _strategy_styles(list(dict.fromkeys(p.case.strategy for shown in points.values() for p in shown)))
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


def _draw_prediction(results, groups, notes):
    """--advise runs: each case's predicted step time against its measured one."""
    panels = {setup: [case for case in cases if case.ran and case.stats("predicted_step_ms")]
              for setup, cases in groups.items()}
    panels = {setup: shown for setup, shown in panels.items() if shown}
    if not panels:
        notes.append((None, "no case carries a prediction (runs without --advise)"))
        return None
    figure, axes, titles = _figure(results, "Predicted against measured step time (parbench --advise)",
                                   panels, [PREDICTION_PANEL_IN] * len(panels))
    for ax, shown in zip(axes, panels.values()):
        measured = [case.stats("step_ms").median for case in shown]
        predicted = [case.stats("predicted_step_ms").median for case in shown]
        low, high = min(measured + predicted) * 0.85, max(measured + predicted) * 1.15
        ax.fill_between([low, high], [low * 0.9, high * 0.9], [low * 1.1, high * 1.1], color="0.92", zorder=0)
        ax.plot([low, high], [low, high], color="0.4", linestyle="--", linewidth=1, zorder=1)
        strategies = list(dict.fromkeys(case.strategy for case in shown))
        for strategy in strategies:
            points = [(m, p) for case, m, p in zip(shown, measured, predicted) if case.strategy == strategy]
            ax.scatter(*zip(*points), s=28, color=STRATEGY_COLORS.get(strategy, OTHER_COLOR), zorder=3)
        recommended = min(range(len(shown)), key=lambda i: shown[i].stats("predicted_rank").median)
        ax.scatter([measured[recommended]], [predicted[recommended]], s=150, facecolor="none",
                   edgecolor="black", linewidth=1.3, zorder=4)
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        ax.set_xlabel("measured step time (ms, median)")
        ax.set_ylabel("predicted step time (ms)")
        _legend_above(ax, [Patch(color=STRATEGY_COLORS.get(s, OTHER_COLOR), label=s) for s in strategies]
                      + [Patch(facecolor="0.92", label="within ±10%")])
    _footer(figure, "Each point is one case: its median measured step time against the step time "
                    "--advise predicted before running it; dashed: predicted = measured; circled: the "
                    "recommended case (predicted fastest).", notes, titles)
    return figure


FIGURES = {"step_time": _draw_step_time, "split_size": _draw_split_size,
           "throughput": _draw_throughput, "memory": _draw_memory, "time_memory": _draw_time_memory,
           "prediction": _draw_prediction,
           "scaling": _draw_scaling}
# Figures drawn only for some runs: their absence is no note ("scaling": a --gpus=LIST run's).
OPTIONAL_FIGURES = {"scaling"}


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


def _bars(ax, cases, widths, errors, texts, floor=None):
    """One horizontal bar per case, error bars where there is a spread, and a text after each bar:
    errors, per bar, (below, above) the bar's end or None (one repetition); texts is a format for
    the width or one string per bar; floor, per bar, where the text may start at the earliest."""
    ys = range(len(cases))
    ax.barh(ys, widths, height=BAR_HEIGHT, color=[STRATEGY_COLORS.get(c.strategy, OTHER_COLOR) for c in cases],
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


def _legend_above(ax, handles):
    """A legend above the panel's top right corner, where it covers no bar or label."""
    ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=len(handles),
              frameon=False, borderaxespad=0.2)


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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path, help="folder for the figures (created if missing)")
    parser.add_argument("results", nargs="+", help="parbench JSON files (--benchmark_out)")
    args = parser.parse_args(argv)
    try:
        results = pr.load(args.results)
    except pr.ResultsError as error:
        print(f"plot.py: error: {error}", file=sys.stderr)
        return 2
    with pr.staged_output(args.out_dir) as staging:
        rendered = render_figures(results, staging)
    notes = results.notes + rendered.note_lines() + remove_stale_figures(args.out_dir, rendered.written)
    for note in notes:
        print(f"plot.py: note: {note}", file=sys.stderr)
    for name in rendered.written:
        print(f"wrote {args.out_dir / name}.{{{','.join(FORMATS)}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
