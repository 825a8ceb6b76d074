"""The figures' one table of colours and markers: a strategy, a schedule or a device looks the same
in every figure (plot, report, timelines), so that a reader who learned it in one knows it in the
next. Every strategy parbench registers (strategies/, PARBENCH_REGISTER_STRATEGY) has its own
colour and marker here; a strategy from a plug-in takes the next unused one, in the order of the
run's strategies."""
from __future__ import annotations

# Seaborn's "deep" palette, one hue per built-in strategy.
STRATEGY_COLORS = {
    "single": "#4c72b0",
    "model_parallel": "#dd8452",
    "pipeline": "#55a868",
    "data_parallel": "#c44e52",
    "ddp": "#8172b3",
    "zero": "#937860",
    "tensor_parallel": "#da8bc3",
}
STRATEGY_MARKERS = {"single": "o", "model_parallel": "s", "pipeline": "^", "data_parallel": "D", "ddp": "v",
                    "zero": "P", "tensor_parallel": "X"}
# Strategies without their own (plug-ins) take these in turn: none is a built-in's.
OTHER_COLORS = ("#8c8c8c", "#ccb974", "#64b5cd", "#17becf", "#bcbd22", "#7f7f7f")
OTHER_MARKERS = ("*", "h", "<", ">", "p", "d")
OTHER_COLOR = OTHER_COLORS[0]

SCHEDULE_COLORS = {"tutorial": "#55a868", "gpipe": "#1f77b4", "1f1b": "#d62728", "interleaved-1f1b": "#9467bd",
                   "zb-h1": "#8c564b"}
DEVICE_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")


def strategy_styles(strategies) -> dict[str, tuple[str, str]]:
    """strategy -> (marker, colour): the table's for a built-in strategy; the others take the
    next unused pair in turn, so two plug-ins never share a colour (up to len(OTHER_COLORS) of them).
    Given the same strategies in the same order, the same answer: every figure of a run asks with
    the run's strategies, so a plug-in keeps its colour from figure to figure."""
    strategies = list(dict.fromkeys(strategies))
    others = [strategy for strategy in strategies if strategy not in STRATEGY_COLORS]
    styles = {strategy: (STRATEGY_MARKERS[strategy], STRATEGY_COLORS[strategy])
              for strategy in strategies if strategy in STRATEGY_COLORS}
    for index, strategy in enumerate(others):
        styles[strategy] = (OTHER_MARKERS[index % len(OTHER_MARKERS)], OTHER_COLORS[index % len(OTHER_COLORS)])
    return styles


def schedule_color(schedule: str) -> str:
    return SCHEDULE_COLORS.get(schedule, OTHER_COLOR)
