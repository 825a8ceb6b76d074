"""The figures' data and look, checked against numbers computed here from parbench's JSON alone
(docs/JSON.md) and from the formulas of docs/METRICS.md, not through plots/parbench_results:
each schedule's ideal in the split_size figure, the prediction figures' pairs, the split
trade-off's points, the all-reduce busbw points, one colour per strategy from one table, and
legends that sit outside every panel."""
import gzip
import json
import math
import re
import statistics
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.transforms import Bbox

from parbench_results import cases as pr
from parbench_results import plot, styles
from scripts import REPO
from test_plots_report import assert_readable  # every text apart, bar texts inside their panel

FIXTURES = Path(__file__).resolve().with_name("fixtures")
# A 2-GPU run with every schedule (interleaved-1f1b at 2 chunks) swept over four splits, under
# --advise with its peak memory predicted; and a 4-GPU run of the same sweep.
ADVISE_RUN = [REPO / "tests/python/fixtures/gpu_runs/2xh200_advise_resnet.json.gz"]
FOUR_GPU_RUN = [REPO / "reports/2026-11-26-4xh200/callA/ref4_resnet_128_fp32.json"]
ALLREDUCE_RUN = [REPO / "reports/2026-11-26-4xh200/callA/ref4_allreduce_2.json",
                 REPO / "reports/2026-11-26-4xh200/callA/ref4_allreduce_4.json"]
# zero and tensor_parallel beside the other strategies, under --advise.
MIXED_RUN = [REPO / "reports/2026-11-26-2xh200-memory/call1/mem2_gpt.json"]
GPU_RUN = [FIXTURES / "gpu_run.json", FIXTURES / "gpu_run_ddp.json"]

# Work units per micro-batch in each schedule's ideal bubble (S-1)/(wM+S-1): docs/METRICS.md,
# "The pipeline's ideal bubble"; interleaved-1f1b's w is its chunks per device.
WORK_PER_MICRO_BATCH = {"tutorial": 1, "gpipe": 1, "1f1b": 1, "zb-h1": 3}


def drawn(files):
    figures, _ = plot.draw_figures(pr.load([str(path) for path in files]))
    for figure in figures.values():
        FigureCanvasAgg(figure).draw()
    return figures


@pytest.fixture(scope="module")
def advise_figures():
    return drawn(ADVISE_RUN)


def repetitions(files):
    """run_name -> its per-repetition entries that ran, straight from the JSON."""
    found = {}
    for path in files:
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rt") as file:
            entries = json.load(file)["benchmarks"]
        for entry in entries:
            if entry["run_type"] == "iteration" and not entry.get("error_occurred"):
                found.setdefault(entry["run_name"], []).append(entry)
    return found


def median(entries, counter):
    return statistics.median(entry[counter] for entry in entries)


def per_device(entries, stem):
    """device -> every repetition's value of the counter stem_dev<i>."""
    values = {}
    for entry in entries:
        for key, value in entry.items():
            if match := re.fullmatch(rf"{stem}_dev(\d+)", key):
                values.setdefault(int(match.group(1)), []).append(value)
    return values


def field(name, key):
    match = re.search(rf"/{key}:([^/]+)", name)
    return match.group(1) if match else None


def registered_strategies():
    """The names strategies/ registers (StrategyInfo("name") under PARBENCH_REGISTER_STRATEGY)."""
    names = set()
    for path in (REPO / "strategies").rglob("*.cpp"):
        names |= set(re.findall(r'StrategyInfo\("(\w+)"\)', path.read_text()))
    return names


def test_every_registered_strategy_has_a_colour_and_marker_of_its_own():
    names = registered_strategies()
    assert {"single", "pipeline", "ddp", "zero", "tensor_parallel"} <= names
    assert names <= set(styles.STRATEGY_COLORS), names - set(styles.STRATEGY_COLORS)
    assert names <= set(styles.STRATEGY_MARKERS), names - set(styles.STRATEGY_MARKERS)
    colors = [to_hex(styles.STRATEGY_COLORS[name]) for name in names]
    assert len(set(colors)) == len(colors), "two strategies share a colour"
    markers = [styles.STRATEGY_MARKERS[name] for name in names]
    assert len(set(markers)) == len(markers), "two strategies share a marker"
    # Plug-ins take colours no built-in has, and none another plug-in has.
    plugins = ["plugin_a", "plugin_b", "plugin_c"]
    given = styles.strategy_styles(sorted(names) + plugins)
    every_color = [to_hex(color) for _, color in given.values()]
    assert len(set(every_color)) == len(every_color)
    assert {name: given[name][1] for name in names} == {name: styles.STRATEGY_COLORS[name] for name in names}
    assert styles.strategy_styles(["plugin_b", "plugin_a"]) == styles.strategy_styles(["plugin_b", "plugin_a"])


def bar_colors(ax):
    """Row label's first line (the strategy) -> the colours of its bars."""
    labels = [label.get_text().split("\n")[0] for label in ax.get_yticklabels()]
    found = {}
    for patch in ax.patches:
        if patch.get_facecolor()[3] > 0 and patch.get_height() > 0:  # not the ideal's outline
            row = round(patch.get_y() + patch.get_height() / 2)
            found.setdefault(labels[row], set()).add(to_hex(patch.get_facecolor()))
    return found


def test_every_figure_colours_a_strategy_from_the_one_table():
    figures = drawn(MIXED_RUN)
    table = {name: to_hex(color) for name, color in styles.STRATEGY_COLORS.items()}
    for name in ("step_time", "throughput"):
        for ax in figures[name].axes:
            for strategy, colors in bar_colors(ax).items():
                assert colors == {table[strategy]}, (name, strategy, colors)
    seen = set()
    for name in ("prediction", "time_memory"):
        for ax in figures[name].axes:
            for collection in ax.collections:
                if collection.get_label() in table:
                    seen.add(collection.get_label())
                    assert to_hex(collection.get_facecolor()[0]) == table[collection.get_label()], name
    assert {"zero", "tensor_parallel"} <= seen


def expected_ideal(schedule, devices, batch, split, chunks):
    micro_batches = math.ceil(batch / split)
    work = chunks if schedule == "interleaved-1f1b" else WORK_PER_MICRO_BATCH[schedule]
    return devices * (1 - (devices - 1) / (work * micro_batches + devices - 1))


@pytest.mark.parametrize("files, devices", [(ADVISE_RUN, 2), (FOUR_GPU_RUN, 4)], ids=["2_gpus", "4_gpus"])
def test_split_size_draws_each_schedules_own_ideal(files, devices):
    figure = drawn(files)["split_size"]
    schedules = {field(name, "schedule") for name in repetitions(files) if name.startswith("train/pipeline/")}
    assert schedules == {"tutorial", "gpipe", "1f1b", "interleaved-1f1b", "zb-h1"}
    for ax in figure.axes:
        ideals = [line for line in ax.get_lines() if line.get_label().startswith("ideal, ")]
        covered = []
        for line in ideals:
            named = line.get_label().removeprefix("ideal, ").split(", ")
            covered += named
            if len(named) == 1:  # a schedule's own ideal is drawn in its colour
                assert to_hex(line.get_color()) == to_hex(styles.SCHEDULE_COLORS[named[0]])
            for schedule in named:
                expected = [expected_ideal(schedule, devices, 120, split, 2) for split in line.get_xdata()]
                assert list(line.get_ydata()) == pytest.approx(expected, rel=1e-12), (schedule, line.get_label())
        assert sorted(covered) == sorted(schedules)  # every schedule once
    footer = " ".join(figure.texts[-1].get_text().split())
    assert "(S\u22121)/(3M+S\u22121) for zb-h1" in footer
    assert "(S\u22121)/(2M+S\u22121) for interleaved-1f1b, 2 chunks" in footer


def test_the_ideals_differ_where_the_schedules_do():
    # At M = 2 and S = 2: 1f1b 2*2/3, interleaved at 2 chunks 2*4/5, zb-h1 2*6/7.
    assert expected_ideal("1f1b", 2, 120, 60, 1) == pytest.approx(4 / 3)
    assert expected_ideal("interleaved-1f1b", 2, 120, 60, 2) == pytest.approx(8 / 5)
    assert expected_ideal("zb-h1", 2, 120, 60, 1) == pytest.approx(12 / 7)
    cases = pr.load([str(path) for path in ADVISE_RUN]).train_cases()
    drawn_ideals = {curve.schedules: curve.speedups[60] for curve in plot.ideal_curves(
        [case for case in cases if case.pipelined and case.ran])}
    assert drawn_ideals == pytest.approx({("tutorial", "gpipe", "1f1b"): 4 / 3, ("interleaved-1f1b",): 8 / 5,
                                          ("zb-h1",): 12 / 7})


def flat(points):
    return [value for point in points for value in point]


def scatter_points(ax):
    """Strategy -> sorted (x, y) of its points in a prediction panel."""
    return {collection.get_label(): sorted(map(tuple, collection.get_offsets().tolist()))
            for collection in ax.collections if not collection.get_label().startswith("_")}


def expected_by_strategy(files, pair):
    found = {}
    for name, entries in repetitions(files).items():
        point = pair(entries)
        if point is not None:
            found.setdefault(name.split("/")[1], []).append(point)
    return {strategy: sorted(points) for strategy, points in found.items()}


def test_prediction_pairs_each_cases_median_step_time_with_its_prediction(advise_figures):
    [ax] = advise_figures["prediction"].axes
    expected = expected_by_strategy(ADVISE_RUN, lambda entries: (
        median(entries, "step_ms"), median(entries, "predicted_step_ms")) if "predicted_step_ms" in entries[0] else None)
    assert scatter_points(ax).keys() == expected.keys()
    for strategy, points in expected.items():
        assert flat(scatter_points(ax)[strategy]) == pytest.approx(flat(points), rel=1e-12), strategy


def fullest_peaks(entries):
    """(measured, predicted) of the fullest device: the highest peak_mem_gib_dev<i> over devices and
    repetitions, and the highest over devices of each device's median predicted_peak_gib_dev<i>."""
    measured, predicted = per_device(entries, "peak_mem_gib"), per_device(entries, "predicted_peak_gib")
    if not measured or not predicted:
        return None
    return (max(max(values) for values in measured.values()),
            max(statistics.median(values) for values in predicted.values()))


def test_memory_prediction_pairs_each_cases_fullest_measured_peak_with_its_prediction(advise_figures):
    [ax] = advise_figures["memory_prediction"].axes
    expected = expected_by_strategy(ADVISE_RUN, fullest_peaks)
    assert sum(map(len, expected.values())) > 20
    assert scatter_points(ax).keys() == expected.keys()
    for strategy, points in expected.items():
        assert flat(scatter_points(ax)[strategy]) == pytest.approx(flat(points), rel=1e-12), strategy
    # The report's table gives the same pairs.
    report = plot_report_rows(ADVISE_RUN)
    assert flat(sorted(report)) == pytest.approx(flat(sorted(p for points in expected.values() for p in points)),
                                                 abs=0.005)


def plot_report_rows(files):
    """(measured, predicted) peak of every row of REPORT.md's prediction table."""
    from scripts import import_script
    make_report = import_script("reports/make_report.py")
    results = pr.load([str(path) for path in files])
    rows = []
    for cases in make_report.prediction_groups(results.by_setup()).values():
        for line in make_report.prediction_table(cases)[2:]:
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if cells[5] != "-":
                rows.append((float(cells[6]), float(cells[5])))
    return rows


def test_no_memory_prediction_figure_without_predicted_peaks():
    assert "memory_prediction" not in drawn(GPU_RUN)


def test_split_tradeoff_gives_each_splits_step_time_and_fullest_peak(advise_figures):
    figure = advise_figures["split_tradeoff"]
    left, right = figure.axes
    reps = repetitions(ADVISE_RUN)
    expected = {}
    for name, entries in reps.items():
        if name.startswith("train/pipeline/"):
            expected.setdefault(field(name, "schedule"), []).append((
                int(field(name, "split")), median(entries, "step_ms"),
                max(max(values) for values in per_device(entries, "peak_mem_gib").values())))
    step_lines = {container.get_label().split(",")[0]: container.lines[0] for container in left.containers}
    assert step_lines.keys() == expected.keys()
    peak_lines = {to_hex(line.get_color()): line for line in right.get_lines() if line.get_linestyle() != "--"}
    assert len(peak_lines) == len(expected)
    for schedule, points in expected.items():
        points.sort()
        peak_line = peak_lines[to_hex(styles.SCHEDULE_COLORS[schedule])]  # each schedule's line in its colour
        line = step_lines[schedule]
        assert list(line.get_xdata()) == [split for split, _, _ in points]
        assert list(line.get_ydata()) == pytest.approx([step for _, step, _ in points], rel=1e-12)
        assert list(peak_line.get_ydata()) == pytest.approx([peak for _, _, peak in points], rel=1e-12)
    [single] = [entries for name, entries in reps.items() if name.startswith("train/single/")]
    references = [line for line in left.get_lines() if line.get_label() == "single"]
    assert references and references[0].get_ydata()[0] == pytest.approx(median(single, "step_ms"))


def test_allreduce_figure_draws_the_jsons_busbw_per_size_and_rank_count():
    figure = drawn(ALLREDUCE_RUN)["allreduce"]
    [ax] = figure.axes
    expected = {}
    for name, entries in repetitions(ALLREDUCE_RUN).items():
        if name.startswith("comm/allreduce/"):
            expected.setdefault(f"{field(name, 'ranks')} ranks, nccl", []).append(
                (float(field(name, "bytes")), median(entries, "busbw_gbps")))
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert lines.keys() == expected.keys() == {"2 ranks, nccl", "4 ranks, nccl"}
    for label, points in expected.items():
        points.sort()
        assert list(lines[label].get_xdata()) == [size for size, _ in points]
        assert list(lines[label].get_ydata()) == pytest.approx([busbw for _, busbw in points], rel=1e-12)
    assert ax.get_xscale() == "log"


def overlaps(first, second):
    return first.x0 < second.x1 and second.x0 < first.x1 and first.y0 < second.y1 and second.y0 < first.y1


def panel_and_title_row(ax, renderer):
    """The panel and, across its whole width, the row its title takes above it: a legend there
    meets a long title however short this one is."""
    box = ax.get_window_extent(renderer)
    top = max([box.y1] + [title.get_window_extent(renderer).y1 for title in (ax.title, ax._left_title, ax._right_title)
                          if title.get_text()])
    return Bbox.from_extents(box.x0, box.y0, box.x1, top)


@pytest.mark.parametrize("files", [ADVISE_RUN, MIXED_RUN, GPU_RUN, ALLREDUCE_RUN],
                         ids=["advise", "mixed", "gpu_fixture", "allreduce"])
def test_legends_sit_outside_every_panel_and_its_title_row(files):
    for name, figure in drawn(files).items():
        renderer = figure.canvas.get_renderer()
        legends = [ax.get_legend() for ax in figure.axes if ax.get_legend() is not None] + figure.legends
        assert legends or name == "step_time", name
        for legend in legends:
            box = legend.get_window_extent(renderer)
            for ax in figure.axes:
                if ax.get_visible():
                    assert not overlaps(box, panel_and_title_row(ax, renderer)), (name, ax.get_title(loc="left"))


@pytest.mark.parametrize("files", [ADVISE_RUN, MIXED_RUN, FOUR_GPU_RUN, ALLREDUCE_RUN],
                         ids=["advise", "mixed", "4_gpus", "allreduce"])
def test_no_text_overlaps_another_in_the_committed_runs_figures(files):
    assert_readable(drawn(files))


@pytest.mark.parametrize("files", [ADVISE_RUN, MIXED_RUN], ids=["advise", "mixed"])
def test_prediction_panels_take_the_canvas_width(files):
    # Each panel spans most of the figure, the legend beside it: never pushed into a corner.
    for name in ("prediction", "memory_prediction"):
        figure = drawn(files).get(name)
        if figure is None:
            continue
        width = figure.bbox.width
        for ax in figure.axes:
            extent = ax.get_window_extent()
            assert extent.width > 0.6 * width, (name, extent.width, width)
            assert extent.x0 < 0.15 * width, (name, extent.x0, width)
