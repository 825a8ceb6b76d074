"""Draws parbench results (docs/JSON.md) as figures, each as PNG and SVG.

  python3 plots/plot.py OUT_DIR RUN1.json [RUN2.json ...]

step_time   step time per strategy: mean and sample standard deviation of the step_ms counter
            over repetitions; one panel per set-up (precision, ...); pipeline at its best split.
split_size  pipeline step time (mean, standard deviation) against split_size per schedule, the
            single-GPU time as a reference line, the best split (lowest median) marked.
throughput  images/s (median of items_per_second, standard deviation) per strategy against the
            ideal, gpus x single's images/s; scaling efficiency = images/s / ideal on each bar.
memory      peak allocated GiB per device: the highest peak_mem_gib_dev<i> over repetitions.

Missing data (a case that did not run, one repetition, no memory counters) is left out with a
note on stderr and on the figure; a figure without any data is not written. A file that is not
readable parbench output exits with status 2 and one line on stderr, having written nothing.
"""
from __future__ import annotations

import argparse
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.patches import Patch

import parbench_results as pr

FIGURE_NAMES = ("step_time", "split_size", "throughput", "memory")
FORMATS = ("png", "svg")
# 8.6 in at 100 dpi is about 870 px, a README column: the PNG shows at 100 %, fonts at their size.
FIGURE_WIDTH_IN = 8.6
PANEL_HEIGHT_IN = 3.6
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
MIN_SLOTS = 4
# Name fields a bar's label shows (or the panel title has): others are added as "key value".
TICK_FIELDS = {"batch", "image", "precision", "data", "gpus", "schedule", "split", "overlap",
               "bucket_mib", "scaling", "graph"}
SCHEDULE_COLORS = {"tutorial": "#55a868", "gpipe": "#1f77b4", "1f1b": "#d62728"}
DEVICE_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")


@dataclass
class Rendered:
    written: list[str] = field(default_factory=list)  # figure names, without extension
    skipped: dict[str, str] = field(default_factory=dict)  # figure name -> why it was not drawn
    # what figures leave out and why -> the figures concerned
    notes: dict[str, list[str]] = field(default_factory=dict)

    def note_lines(self) -> list[str]:
        return ([f"{', '.join(figures)}: {note}" for note, figures in self.notes.items()]
                + [f"{name}: {reason}; figure not written" for name, reason in self.skipped.items()])


def render_figures(results: pr.Results, out_dir: Path) -> Rendered:
    """Writes every figure that has data into out_dir."""
    rendered = Rendered()
    groups = results.by_setup()
    with rc_context(STYLE):
        for name, draw in (("step_time", _draw_step_time), ("split_size", _draw_split_size),
                           ("throughput", _draw_throughput), ("memory", _draw_memory)):
            notes: list[tuple[pr.Setup | None, str]] = []
            figure = draw(results, groups, notes)
            for setup, text in notes:
                if setup is not None:
                    rendered.notes.setdefault(f"{setup.describe()}: {text}", []).append(name)
            if figure is None:
                rendered.skipped[name] = "; ".join(text for setup, text in notes if setup is None)
                continue
            for extension in FORMATS:
                figure.savefig(out_dir / f"{name}.{extension}", dpi=DPI, bbox_inches="tight",
                               metadata={"Date": None} if extension == "svg" else None)
            rendered.written.append(name)
    return rendered


def remove_stale_figures(out_dir: Path, written: list[str]) -> list[str]:
    """Deletes this tool's figures in out_dir that this run did not draw, so none is mistaken
    for this run's; returns notes on what went."""
    notes = []
    for name in FIGURE_NAMES:
        for extension in FORMATS:
            path = out_dir / f"{name}.{extension}"
            if name not in written and path.exists():
                path.unlink()
                notes.append(f"{name}: removed {path}, left from an earlier run")
    return notes


# Each _draw_* returns a figure and appends (set-up, text) to notes for what it leaves out; or,
# where there is nothing to draw, returns None and appends (None, why).

def _draw_step_time(results, groups, notes):
    panels = _headline_panels(groups, notes)
    if not panels:
        return None
    figure, axes, titles = _figure(results, "Training step time per strategy", panels)
    for ax, (setup, shown) in zip(axes, panels.items()):
        stats = [case.stats("step_ms") for case in shown]
        _bars(ax, shown, [s.mean for s in stats], [s.stddev for s in stats], "{:.1f}")
        _note_one_repetition(setup, shown, stats, notes)
        ax.set_ylabel("step time (ms)")
    _footer(figure, "Bars: mean over repetitions; error bars: \u00b11 sample standard deviation; "
                    "pipeline at its best split (lowest median step time).", notes, titles)
    return figure


def _draw_split_size(results, groups, notes):
    panels = {setup: [case for case in cases if case.strategy == "pipeline" and case.ran]
              for setup, cases in groups.items()}
    panels = {setup: pipeline for setup, pipeline in panels.items() if pipeline}
    if not panels:
        notes.append((None, "no pipeline case ran"))
        return None
    figure, axes, titles = _figure(results, "Pipeline step time against split_size", panels)
    for ax, (setup, pipeline) in zip(axes, panels.items()):
        for best in sorted(pr.best_splits(pipeline).values(), key=pr.Case.sort_key):
            points = sorted((case for case in pipeline if case.series == best.series),
                            key=lambda case: case.split_size)
            stats = [case.stats("step_ms") for case in points]
            color = SCHEDULE_COLORS.get(best.fields["schedule"], OTHER_COLOR)
            ax.errorbar([case.split_size for case in points], [s.mean for s in stats],
                        yerr=[s.stddev or 0.0 for s in stats], marker="o", capsize=3, color=color,
                        label=_series_name(best, pipeline))
            best_mean = best.stats("step_ms").mean
            ax.plot([best.split_size], [best_mean], marker="*", markersize=16, color=color,
                    markeredgecolor="black", zorder=5)
            ax.annotate(f"best {best.split_size}", (best.split_size, best_mean), xytext=(0, -14),
                        textcoords="offset points", ha="center", va="top", fontsize=9, color=color)
            _note_one_repetition(setup, points, stats, notes)
        single = pr.single_reference(groups[setup])
        if single is None:
            notes.append((setup, "no single-GPU case ran, so no reference line"))
        else:
            reference = single.stats("step_ms")
            ax.axhline(reference.mean, color="0.35", linestyle="--",
                       label=f"single GPU ({reference.mean:.1f} ms)")
            if reference.stddev is not None:
                ax.axhspan(reference.mean - reference.stddev, reference.mean + reference.stddev,
                           color="0.35", alpha=0.12, linewidth=0)
        splits = sorted({case.split_size for case in pipeline})
        ax.set_xscale("log", base=2)
        ax.set_xticks(splits, [str(split) for split in splits])
        ax.minorticks_off()
        ax.set_xlabel("split_size (images per micro-batch, log scale)")
        ax.set_ylabel("step time (ms)")
        ax.margins(x=0.08, y=0.15)
        ax.legend(loc="best")
    _footer(figure, "Points: mean over repetitions; error bars and grey band: \u00b11 sample "
                    "standard deviation; \u2605 the split with the lowest median step time.", notes, titles)
    return figure


def _draw_throughput(results, groups, notes):
    panels = _headline_panels(groups, notes)
    if not panels:
        return None
    figure, axes, titles = _figure(results, "Throughput per strategy against ideal scaling", panels)
    for ax, (setup, shown) in zip(axes, panels.items()):
        stats = [case.stats("items_per_second") for case in shown]
        heights = [s.median for s in stats]
        single = pr.single_reference(groups[setup])
        if single is None:
            notes.append((setup, "no single-GPU case ran, so no ideal and no efficiency"))
            _bars(ax, shown, heights, [s.stddev for s in stats], "{:,.0f}")
        else:
            ideal = [case.gpus * single.stats("items_per_second").median for case in shown]
            ax.bar(range(len(shown)), ideal, width=0.7, facecolor="none", edgecolor="0.3",
                   linestyle="--", linewidth=1.2, zorder=1)
            texts = [f"{height:,.0f} (reference)" if case is single
                     else f"{pr.scaling_efficiency(case, single):.0%} of ideal"
                     for case, height in zip(shown, heights)]
            _bars(ax, shown, heights, [s.stddev for s in stats], texts, floor=ideal)
            _legend_above(ax, [Patch(facecolor="0.6", label="measured (median)"),
                               Patch(facecolor="none", edgecolor="0.3", linestyle="--",
                                     label="ideal: gpus \u00d7 single")])
        _note_one_repetition(setup, shown, stats, notes)
        ax.set_ylabel("throughput (images/s)")
    _footer(figure, "Bars: median images/s over repetitions; error bars: \u00b11 sample standard "
                    "deviation; efficiency = images/s / (gpus \u00d7 single's images/s).", notes, titles)
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
    figure, axes, titles = _figure(results, "Peak allocated memory per device", panels)
    for ax, shown in zip(axes, panels.values()):
        devices = sorted({device for case in shown for device in case.peak_memory_gib()})
        colors = {device: DEVICE_COLORS[device % len(DEVICE_COLORS)] for device in devices}
        width = 0.8 / len(devices)
        for x, case in enumerate(shown):
            peaks = case.peak_memory_gib()
            for slot, (device, peak) in enumerate(peaks.items()):
                position = x + (slot - (len(peaks) - 1) / 2) * width  # centred on the case's tick
                ax.bar(position, peak, width=width, color=colors[device])
                ax.annotate(f"{peak:.1f}", (position, peak), xytext=(0, 2), textcoords="offset points",
                            ha="center", va="bottom", fontsize=9)
        _strategy_ticks(ax, shown)
        ax.margins(y=0.15)
        ax.set_ylabel("peak allocated (GiB)")
        _legend_above(ax, [Patch(color=color, label=f"device {device}") for device, color in colors.items()])
    _footer(figure, "Peak allocated GiB on each device since the case's set-up, highest over "
                    "repetitions; pipeline at its best split.", notes, titles)
    return figure


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


def _figure(results, what, panels):
    """A figure with one panel per set-up, stacked. The title says what all panels share, each
    panel's title what is its own; returns the figure, the axes and set-up -> panel title."""
    parts = [setup.parts() for setup in panels]
    common = {key: value for key, value in parts[0].items()
              if key != "precision" and all(p.get(key) == value for p in parts)}
    figure = Figure(figsize=(FIGURE_WIDTH_IN, 0.9 + PANEL_HEIGHT_IN * len(panels)), layout="constrained")
    axes = figure.subplots(len(panels), 1, squeeze=False)[:, 0]
    subtitle = ", ".join(list(common.values()) + [_hardware(results)])
    figure.suptitle(f"{what}\n{textwrap.fill(subtitle, 100)}")
    titles = {}
    for ax, setup, part in zip(axes, panels, parts):
        titles[setup] = ", ".join(value for key, value in part.items() if key not in common)
        ax.set_title(titles[setup], loc="left", fontweight="bold")
    return figure, axes, titles


def _hardware(results):
    """The GPUs the files ran on, and the timer where it is not device-synchronised."""
    text = " | ".join(map(pr.describe_gpus, results.context_values("gpu_names")))
    if "host" in results.context_values("timer"):
        text += " (host-clock timer, no device sync)"
    return text


def _bars(ax, cases, heights, stddevs, texts, floor=None):
    """One bar per case, error bars where there is a spread, and a text above each bar: texts is
    a format for the height or one string per bar; floor, per bar, the lowest the text may sit."""
    xs = range(len(cases))
    ax.bar(xs, heights, width=0.7, color=[STRATEGY_COLORS.get(c.strategy, OTHER_COLOR) for c in cases],
           zorder=2)
    spread = [(x, height, stddev) for x, height, stddev in zip(xs, heights, stddevs) if stddev is not None]
    if spread:
        x, height, stddev = zip(*spread)
        ax.errorbar(x, height, yerr=stddev, fmt="none", ecolor="black", capsize=4, zorder=3)
    if isinstance(texts, str):
        texts = [texts.format(height) for height in heights]
    for x, height, stddev, text in zip(xs, heights, stddevs, texts):
        top = max(height + (stddev or 0.0), floor[x] if floor else 0.0)
        if stddev is None:
            text += "\n(1 repetition)"
        ax.annotate(text, (x, top), xytext=(0, 3), textcoords="offset points", ha="center",
                    va="bottom", fontsize=9)
    _strategy_ticks(ax, cases)
    ax.margins(y=0.2)


def _strategy_ticks(ax, cases):
    ax.set_xticks(range(len(cases)), [_tick_label(case) for case in cases])
    # Room for at least MIN_SLOTS bars, so one or two bars are not drawn a panel wide.
    padding = max(0.0, (MIN_SLOTS - len(cases)) / 2)
    ax.set_xlim(-0.6 - padding, len(cases) - 0.4 + padding)


def _tick_label(case):
    """A short multi-line bar label: strategy, GPUs, then the fields that tell variants apart."""
    fields = case.fields
    lines = [case.strategy]
    if case.strategy != "single":
        lines.append(f"{case.gpus} GPUs")
    if "schedule" in fields:
        lines.append(fields["schedule"])
    if "split" in fields:
        lines.append(f"best split {fields['split']}")
    if "overlap" in fields:
        lines.append(f"overlap {fields['overlap']}")
    if "bucket_mib" in fields:  # ddp, whose names always carry scaling too
        lines.append(f"{fields['bucket_mib']} MiB, {fields['scaling']}")
    lines += [f"{key} {value}" for key, value in fields.items() if key not in TICK_FIELDS]
    return "\n".join(lines)


def _series_name(case, pipeline_cases):
    """A pipeline series' legend entry: its schedule, plus the GPU count where that varies."""
    name = case.fields["schedule"]
    if len({c.gpus for c in pipeline_cases}) > 1:
        name += f", {case.gpus} GPUs"
    extra = [f"{key} {value}" for key, value in case.series if key not in ("gpus", "schedule")]
    return ", ".join([name] + extra)


def _legend_above(ax, handles):
    """A legend above the panel's top right corner, where it covers no bar or label."""
    ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=len(handles),
              frameon=False, borderaxespad=0.2)


def _note_not_run(setup, cases, notes):
    for case in cases:
        if not case.ran:
            notes.append((setup, f"{case.title()} did not run: {'; '.join(dict.fromkeys(case.errors))}"))


def _note_one_repetition(setup, cases, stats, notes):
    for case, stat in zip(cases, stats):
        if stat.count == 1:
            notes.append((setup, f"{case.title()} has 1 repetition, so no spread is drawn"))


def _footer(figure, caption, notes, titles):
    """The caption and notes under the panels, each note under its panel's title; savefig's tight
    bounding box grows to take them in."""
    lines = [caption] + [f"{titles.get(setup, setup.describe())}: {text}" for setup, text in notes]
    wrapped = [textwrap.fill(line, 110, subsequent_indent="  ") for line in dict.fromkeys(lines)]
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
