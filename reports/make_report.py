"""Writes OUT_DIR/REPORT.md and the figures of parbench_results.plot for one parbench run.

  python3 reports/make_report.py OUT_DIR RUN1.json [RUN2.json ...] [BASELINE.json ...]

Any of the files may be gzip-compressed, named FILE.json.gz (a raw run kept small): it is
read decompressed.

Per set-up (model, batch, image, precision, data mode) it computes, over each case's
per-repetition entries:
  step time     median of step_ms; spread = sample standard deviation, and min and max
  throughput    images/s for an image model: median of items_per_second; tokens/s for a language
                model (a set-up with a seq): median of tokens_per_second, its sequences/s
                (items_per_second) among the details
  speedup       single's median step time / the case's median step time, same set-up
  efficiency    throughput / (gpus x single's throughput)
  peak memory   highest peak_mem_gib_dev<i> over repetitions, per device
  memory        per case and device (ddp: rank): parameters, gradients, optimizer state, model
                states (GPUs: measured by the caching allocator), activations at the peak, peak
                allocated and reserved, allocator retries and OOMs: the highest of each over the
                repetitions (schema 1.6.0; docs/METRICS.md, "Memory")
  MFU           median mfu (datasheet peak) and mfu_gemm (GEMM probe's peak), GPU cases
  clocks        GPU runs (schema 1.5.0): repetitions flagged `throttled` per case (also in the
                summary's reps column), the lowest SM clock, highest temperature and power and
                the clock-event reasons seen per device; with --max-noise, the noise each case reached
  best split    pipeline: the split_size with the lowest median step time, per schedule
  flags         repetitions flagged `stalled` (in the reps column, and a note at the top), and a
                scaling efficiency above 100% beyond the noise (the two throughputs' relative
                spreads summed; "above ideal" in the efficiency column, and a note at the top)
  scaling       a run at several device counts (parbench --gpus=LIST): per set-up, each strategy's
                case of highest median throughput at each count (ddp weak and strong apart), its
                ideal (gpus x single's throughput) and scaling efficiency, in a table and a figure;
                --advise's predictions compared per count, as it ranks them
  all-reduce    comm/allreduce: median time, algbw and busbw per size and rank count
  timelines     pipeline cases run with --trace: the measured timeline of the traced step beside
                the schedule simulator's (parbench_results.pipeline_timeline), drawn for each schedule's
                best split, and every case's measured bubble per device in the split sweep and
                in OUT_DIR/timelines.json (docs/JSON.md, "timelines.json")
  PyTorch       PyTorch baselines (benchmarks/pytorch/, docs/JSON.md "PyTorch baselines") given
                beside parbench's JSON: each matched to the parbench case of the same fields, with
                both median step times and their ratio; baselines with no match are listed too
and states the findings (highest throughput, lowest step time, best split, every strategy ranked
by throughput) in sentences built from those numbers, each set-up in its own unit. Multi-device
cases that ran on CPU devices (no GPU visible) are called CPU stand-ins, at the top and in each
finding: they show the code paths and the harness, not what the strategies achieve on GPUs.
Skipped cases are listed once per reason, failed ones one by one with their errors. REPORT.md and
the figures are written to a staging folder and moved into place, so an error leaves none behind;
a file that is not readable parbench output exits with status 2 and one line on stderr.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from matplotlib import rc_context

# The reader and the figures: this checkout's Python package (pyproject.toml), which ci/setup.sh installs.
from parbench_results import baselines as pb
from parbench_results import cases as pr
from parbench_results import pipeline_timeline as pt
from parbench_results import plot, timeline_plot

FIGURE_CAPTIONS = {
    "step_time": "Step time per strategy (median over repetitions, whiskers min\u2013max)",
    "split_size": "Pipeline speedup over single against split_size, with each schedule's ideal",
    "split_tradeoff": "Step time and peak memory against split_size per schedule: the pipeline's trade-off",
    "throughput": "Throughput ({unit}) per strategy against ideal scaling, with scaling efficiency",
    "memory": "Peak allocated memory per device",
    "time_memory": "Throughput ({unit}) against peak memory per case, with the frontier of the time-memory choice",
    "prediction": "Predicted against measured step time (parbench --advise)",
    "memory_prediction": "Predicted against measured peak memory of the fullest device (parbench --advise)",
    "scaling": "Throughput ({unit}) and scaling efficiency against the GPU count, with the ideal",
    "allreduce": "All-reduce bus bandwidth (busbw) against message size, per rank count",
}
TIMELINES_FILE = "timelines.json"
TIMELINES_SCHEMA = "1.0.0"  # semver, as parbench_json_schema (docs/JSON.md, "timelines.json")
TIMELINE_FIGURE_PREFIX = "timeline_"
ENVIRONMENT_ROWS = (
    ("date", "date"),
    ("host", "host"),
    ("GPUs", "gpu_names"),
    ("devices", "devices"),
    ("parbench", "parbench_version"),
    ("JSON schema", "parbench_json_schema"),
    ("git", "git_sha"),
    ("LibTorch", "libtorch_version"),
    ("CUDA", "cuda_version"),
    ("cuDNN", "cudnn_version"),
    ("NCCL", "nccl_version"),
    ("TF32 cuDNN / matmul", "tf32_cudnn"),
    ("timer", "timer"),
    ("Google Benchmark library", "library_build_type"),
    ("preset", "preset"),
    ("CPUs", "num_cpus"),
)


@dataclass
class CaseTimeline:
    """A traced pipeline case's measured step and, where parbench wrote one, the simulator's."""

    case: pr.Case
    trace: Path
    measured: pt.Timeline
    predicted: pt.Predicted | None
    figure: str | None = None  # the figure's name without extension, where the report draws one


def load_timelines(results: pr.Results) -> tuple[dict[str, CaseTimeline], list[str]]:
    """Case name -> its timeline, for every pipeline case whose label names a trace; and notes on
    the traces that could not be read, which the report goes on without."""
    timelines, notes = {}, []
    for case in results.train_cases():
        if not case.pipelined or not case.ran or "trace" not in case.label:
            continue
        trace = _find_trace(case)
        if trace is None:
            notes.append(f"{case.name}: its trace {case.label['trace']} is not there, nor beside "
                         f"{case.files[0]}; no timeline")
            continue
        try:
            measured = pt.measured_timeline(pt.read_trace(trace), case.gpus, str(trace))
            predicted_file = pt.predicted_path(trace)
            predicted = pt.predicted_timeline(predicted_file) if predicted_file.is_file() else None
        except pt.TimelineError as error:
            notes.append(f"{case.name}: no timeline: {error}")
            continue
        timelines[case.name] = CaseTimeline(case, trace, measured, predicted)
    return timelines, notes


def _find_trace(case: pr.Case) -> Path | None:
    """The label's path as parbench wrote it (relative to where it ran), else the file beside the
    results file or in a traces/ folder there (a results folder moved since)."""
    written = Path(case.label["trace"])
    folder = Path(case.files[0]).parent
    for candidate in (written, folder / written, folder / written.name, folder / "traces" / written.name):
        if candidate.is_file():
            return candidate
    return None


def no_prediction_note(case: pr.Case) -> str:
    """Why a traced pipeline case has no predicted panel."""
    lanes = int(case.fields.get("lanes", 1))
    if lanes > 1:
        return (f"No predicted panel: this case ran on {lanes} lanes, and the schedule simulator gives each "
                "device one compute stream (docs/METRICS.md, \"Predicted step time\").")
    return ("No predicted panel: no <case>.predicted.json beside the trace (parbench writes one for every "
            "pipeline case on one lane, unless its profile failed).")


def draw_timeline_figures(results: pr.Results, timelines: dict[str, CaseTimeline], out_dir: Path) -> list[str]:
    """One figure per pipeline series (schedule, devices, ...) at its best split, where that case
    was traced; returns the figures' names."""
    written = []
    machines = results.describe_machines()
    with rc_context(plot.STYLE):
        for setup, cases in results.by_setup().items():
            for best in sorted(pr.best_splits(cases).values(), key=pr.Case.sort_key):
                timeline = timelines.get(best.name)
                if timeline is None:
                    continue
                slug = "_".join([best.model, *(f"{key}-{value}" for key, value in best.named_fields.items())])
                name = TIMELINE_FIGURE_PREFIX + re.sub(r"[^A-Za-z0-9._-]+", "-", slug)
                note = ""
                if timeline.predicted is None:
                    note = no_prediction_note(best)
                if best.cpu_stand_in:
                    note += (" " if note else "") + "CPU stand-ins: both devices share this machine's CPUs."
                figure = timeline_plot.draw_timeline(
                    f"pipeline: {best.config()}; {setup.describe()}; {machines}", timeline.measured,
                    timeline.predicted, best.schedule_facts(), best.ideal_bubble_fraction(), note)
                for extension in plot.FORMATS:
                    figure.savefig(out_dir / f"{name}.{extension}", dpi=plot.DPI, bbox_inches="tight",
                                   metadata={"Date": None} if extension == "svg" else None)
                timeline.figure = name
                written.append(name)
    return written


def remove_stale_timelines(out_dir: Path, written: list[str], wrote_json: bool) -> list[str]:
    """Deletes timeline figures (and timelines.json) in out_dir that this run did not write."""
    notes = []
    stale = [path for path in out_dir.glob(f"{TIMELINE_FIGURE_PREFIX}*")
             if path.suffix.lstrip(".") in plot.FORMATS and path.stem not in written]
    if not wrote_json and (out_dir / TIMELINES_FILE).exists():
        stale.append(out_dir / TIMELINES_FILE)
    for path in sorted(stale):
        path.unlink()
        notes.append(f"removed {path}, left from an earlier run")
    return notes


def timelines_document(results: pr.Results, timelines: dict[str, CaseTimeline],
                       generated: datetime.datetime) -> dict:
    """timelines.json: each traced pipeline case's measured bubble per device beside the ideal
    and the predicted one, and its spans (docs/JSON.md, "timelines.json")."""
    entries = []
    for name, timeline in timelines.items():
        case, measured, predicted = timeline.case, timeline.measured, timeline.predicted
        entries.append({
            "case": name,
            "trace": str(timeline.trace),
            "schedule": case.fields["schedule"],
            "devices": case.gpus,
            "micro_batches": case.micro_batches(),
            "chunks": int(case.fields.get("chunks", 1)),
            "source": measured.source,
            "measured_step_ms": round(measured.step_ms, 6),
            "measured_bubble_fraction": [round(value, 6) for value in measured.bubble],
            "ideal_bubble_fraction": round(case.ideal_bubble_fraction(), 6),
            "predicted_step_ms": round(predicted.timeline.step_ms, 6) if predicted else None,
            "predicted_bubble_fraction": [round(value, 6) for value in predicted.timeline.bubble] if predicted else None,
            "figure": f"{timeline.figure}.png" if timeline.figure else None,
            "spans": [{"device": span.device, "lane": span.lane, "stage": span.stage, "op": span.op,
                       "micro_batch": span.micro_batch, "start_ms": round(span.start_ms, 6),
                       "end_ms": round(span.end_ms, 6),
                       "busy_ms": round(pt.covered(span.busy), 6)} for span in measured.spans],
        })
    return {
        "parbench_timelines_schema": TIMELINES_SCHEMA,
        "meta": {"generator": "reports/make_report.py", "generated": f"{generated:%Y-%m-%dT%H:%M:%SZ}",
                 "results": [run.path for run in results.runs],
                 "git_sha": results.context_values("git_sha")},
        "timelines": entries,
    }


def timelines_section(results: pr.Results, timelines: dict[str, CaseTimeline]) -> list[str]:
    drawn = {setup: [timelines[case.name] for case in sorted(pr.best_splits(cases).values(), key=pr.Case.sort_key)
                     if case.name in timelines and timelines[case.name].figure]
             for setup, cases in results.by_setup().items()}
    lines = ["## Pipeline timelines", "",
             "One traced step (`parbench --trace`: a step outside the timed ones) of each schedule at its "
             "best split: measured above, from the trace's GPU kernels (host ops on CPU devices), and "
             "the schedule simulator's prediction below, on the same time axis. Each row's label gives "
             "the device's bubble, 1 \u2212 busy / step (docs/METRICS.md, \"Pipeline timelines\"); "
             f"every traced split's is in the split sweep and in `{TIMELINES_FILE}`.", ""]
    for setup, shown in drawn.items():
        if not shown:
            continue
        lines += [f"### {setup.describe()}", ""]
        for timeline in shown:
            caption = f"{timeline.case.config()}: measured and predicted timelines"
            lines += [f"![{caption}]({timeline.figure}.png)", "", f"*{caption}* ([SVG]({timeline.figure}.svg))", ""]
    return lines


def build_report(results: pr.Results, rendered: plot.Rendered, generated: datetime.datetime,
                 timelines: dict[str, CaseTimeline] | None = None,
                 baselines: list[pb.Baseline] | None = None) -> str:
    files = ", ".join(f"`{run.path}`" for run in results.runs)
    groups = results.by_setup()
    lines = ["# parbench report", "",
             f"Generated {generated:%Y-%m-%d %H:%M} UTC by `reports/make_report.py` from {files}, "
             f"run on {results.describe_machines()}.", ""]
    stand_ins = results.cpu_stand_ins()
    if stand_ins:
        lines += [cpu_stand_in_note(stand_ins, results), ""]
    throttled_cases = [case for case in results.train_cases() if _throttled(case)]
    if throttled_cases:
        count = sum(_throttled(case) for case in throttled_cases)
        lines += [f"**Throttled:** {count} repetition(s) of {len(throttled_cases)} case(s) ran while a GPU was "
                  "throttled (a clock-event reason, or its SM clock below the run's threshold): their times "
                  "are not the GPU's best (*Clocks and throttling* below).", ""]
    stalled_cases = [case for case in results.train_cases() if _stalled(case)]
    if stalled_cases:
        count = sum(_stalled(case) for case in stalled_cases)
        lines += [f"**Stalled:** {count} repetition(s) of {len(stalled_cases)} case(s) had an iteration at "
                  "least 3\u00d7 their median (`stalled`, docs/METRICS.md): their times are not the case's "
                  "steady pace.", ""]
    above = [(case, single) for cases in groups.values() for case in pr.headline_cases(cases)
             if (single := pr.single_reference(cases)) is not None and above_ideal(case, single)]
    if above:
        named = ", ".join(f"{_name(case)} {pr.scaling_efficiency(case, single):.1%} (noise allows "
                          f"{efficiency_allowance(case, single):.1%} above 100%)" for case, single in above)
        lines += [f"**Above ideal scaling:** {named}. More than the devices can give over `single`: `single` was "
                  "slowed, or the cores were not shared on equal terms (`threads_per_device` in the context), so "
                  "these speedups are not to be trusted.", ""]
    lines += ["## Findings", ""]
    for setup, cases in groups.items():
        sentences = findings(cases)
        if any(case.cpu_stand_in for case in pr.headline_cases(cases)):
            sentences.append("These are CPU stand-ins: the code paths, not GPU performance.")
        lines.append(f"- **{setup.describe()}**: {' '.join(sentences)}")
    lines += ["", "## Summary", "",
              "Step time is the median over repetitions, with the sample standard deviation and the "
              f"min\u2013max as its spread; {throughput_sentence(groups)} speedup and scaling efficiency "
              "compare with the single-GPU case of the same set-up; peak memory is the highest over "
              "repetitions, per device; pipeline is shown at its best split_size "
              "(all splits under *Pipeline split sweep*)."]
    weak = {case.setup for case in results.train_cases() if case.fields.get("scaling") == "weak"}
    if weak:
        unit = plot.throughput_words(weak)
        samples = " or ".join(dict.fromkeys(setup.samples for setup in weak))
        lines[-1] += (" Weak-scaling ddp keeps single's batch on each rank, so one of its steps "
                      f"trains gpus \u00d7 as many {samples}: compare its {unit} and efficiency, not its "
                      "step-time speedup.")
    lines.append("")
    for setup, cases in groups.items():
        lines += [f"### {setup.describe()}", "", *summary_table(cases), ""]
    lines += fit_section(results)
    lines += memory_section(results)
    lines += clocks_section(results)
    lines += noise_section(results)
    lines += scaling_section(groups)
    sweeps = {setup: cases for setup, cases in groups.items()
              if any(case.pipelined and case.ran for case in cases)}
    if sweeps:
        lines += ["## Pipeline split sweep", ""]
        for setup, cases in sweeps.items():
            lines += [f"### {setup.describe()}", "", *sweep_table(cases, timelines or {}), ""]
    if any(timeline.figure for timeline in (timelines or {}).values()):
        lines += timelines_section(results, timelines)
    allreduces = [case for case in results.cases if case.family == "comm" and case.strategy == "allreduce" and case.ran]
    if allreduces:
        lines += ["## All-reduce", "",
                  "Time per all-reduce of a float32 buffer across the ranks (median over repetitions); "
                  "algbw = size / time, busbw = algbw × 2(n-1)/n (docs/METRICS.md).", "",
                  *allreduce_table(allreduces), ""]
    # --advise ranks the cases of one global batch together: weak-scaling ddp ranks apart from single.
    predicted = prediction_groups(groups)
    if predicted:
        lines += ["## Predicted vs measured", "", *prediction_preamble(results), ""]
        for (setup, global_batch, count), cases in predicted.items():
            heading = setup.describe() + ("" if global_batch == setup.batch else f", global batch {global_batch}")
            heading += f", {count} GPUs" if count else ""
            lines += [f"### {heading}", "", *prediction_table(cases), "", prediction_summary(cases), ""]
    if baselines:
        lines += pytorch_section(results, baselines)
    lines += ["## Figures", ""]
    unit = plot.throughput_words(groups)
    for name in rendered.written:
        caption = FIGURE_CAPTIONS[name].format(unit=unit)
        lines += [f"![{caption}]({name}.png)", "", f"*{caption}* ([SVG]({name}.svg))", ""]
    lines += [f"- No `{name}` figure: {reason}." for name, reason in rendered.skipped.items()]
    if rendered.skipped:
        lines.append("")
    lines += ["## Cases that did not run", "", *not_run_table(results), ""]
    lines += ["## Environment", "", *environment(results), ""]
    others = [case for case in results.cases if case.family != "train" and case not in allreduces]
    if others:
        families = ", ".join(sorted({f"{case.family}/{case.strategy}" for case in others}))
        lines += [f"The input also holds {len(others)} {families} case(s); this report does not "
                  "summarise them.", ""]
    return "\n".join(lines)


def throughput_sentence(setups) -> str:
    """How the summary's throughput column is given, for the set-ups' kinds of model."""
    units = {setup.throughput_unit for setup in setups}
    tokens = "(`tokens_per_second`; the sequences/s behind it is among the details);"
    if units == {"images/s"}:
        return "images/s is the median;"
    if units == {"tokens/s"}:
        return f"tokens/s is the median {tokens}"
    return f"throughput is the median, in images/s for image models and in tokens/s for language models {tokens}"


def pytorch_section(results: pr.Results, baselines: list[pb.Baseline]) -> list[str]:
    """The PyTorch comparison: every baseline matched to its parbench case, then those with none."""
    files = ", ".join(f"`{path}`" for path in dict.fromkeys(b.file for b in baselines))
    lines = ["## PyTorch", "",
             f"PyTorch's own implementations (benchmarks/pytorch/, from {files}) beside the parbench case "
             "with the same fields: same model, batch, loss, optimizer and timing rule. Step times are "
             "medians over repetitions; parbench / PyTorch below 1 means parbench's step is the shorter. "
             "MFU against the datasheet peak (docs/METRICS.md).", ""]
    matched = pb.match(baselines, results)
    rows = []
    for baseline, case in matched:
        if case is None:
            continue
        parbench_ms = case.stats("step_ms").median
        parbench_mfu = case.stats("mfu")
        timer = " (host timer)" if baseline.timer == "host" else ""
        rows.append([case.setup.describe() + timer, _name(case), baseline.describe(), f"{parbench_ms:,.2f}",
                     f"{baseline.step_ms_median:,.2f}",
                     f"{parbench_ms / baseline.step_ms_median:.3f}",
                     f"{parbench_mfu.median:.1%}" if parbench_mfu else "",
                     f"{baseline.mfu:.1%}" if baseline.mfu is not None else "",
                     f"{baseline.peak_mem_gib:.2f}" if baseline.peak_mem_gib is not None else ""])
    if rows:
        lines += _table(["set-up", "parbench case", "PyTorch", "parbench ms", "PyTorch ms", "parbench / PyTorch",
                         "parbench MFU", "PyTorch MFU", "PyTorch peak GiB"], rows)
    else:
        lines.append("No baseline matched a parbench case that ran.")
    unmatched = [baseline for baseline, case in matched if case is None]
    if unmatched:
        lines += ["", "Baselines without a matching parbench case that ran:", ""]
        rows = []
        for baseline in unmatched:
            shown = (f"{baseline.step_ms_median:,.2f} ms" if baseline.ran else f"did not run: {baseline.error}")
            fields = ", ".join(f"{key} {value}" for key, value in baseline.fields.items())
            rows.append([f"`{baseline.name}`", baseline.describe(), f"{baseline.strategy}: {baseline.model}, {fields}",
                         shown])
        lines += _table(["baseline", "PyTorch", "fields", "step time"], rows)
    return lines + [""]


def cpu_stand_in_note(stand_ins: list[pr.Case], results: pr.Results) -> str:
    """What the multi-device cases on CPU devices ran as, and what their numbers can and cannot say."""
    kinds = {}
    for case in sorted(stand_ins, key=pr.Case.sort_key):
        backend = f" over the {case.label['backend']} backend" if "backend" in case.label else ""
        kinds.setdefault(f"`{case.strategy}` on {case.device_count()}{backend}", None)
    cpus = " | ".join(str(value) for value in results.context_values("num_cpus"))
    return (f"> **CPU stand-ins.** No GPU was visible, so {_join(list(kinds))} ran on CPU devices that "
            f"share this machine's {cpus} CPUs. Their numbers show that the code paths and the harness "
            "work; they are not what these strategies achieve on GPUs, and their speedups and scaling "
            "efficiencies say nothing about GPU scaling.")


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def findings(cases: list[pr.Case]) -> list[str]:
    """Two or three sentences on one set-up, every number taken from the cases."""
    shown = pr.headline_cases(cases)
    if not shown:
        return ["No case ran."]
    single = pr.single_reference(cases)
    unit = shown[0].setup.throughput_unit
    ips = {id(case): case.throughput() for case in shown}
    ranked = sorted(shown, key=lambda case: ips[id(case)].median, reverse=True)
    top = ranked[0]
    top_ips = ips[id(top)].median
    if single is None:
        sentences = [f"No single-GPU case ran, so there is no speedup reference; {_name(top)} has "
                     f"the highest throughput, {top_ips:,.0f} {unit}."]
    elif len(ranked) == 1:
        not_run = [case for case in cases if not case.ran]
        why = (f" ({len(not_run)} other case(s) did not run: {'; '.join(dict.fromkeys(r for c in not_run for r in c.reasons()))})"
               if not_run else "")
        return [f"Only `single` ran{why}: {top_ips:,.0f} {unit} at {single.stats('step_ms').median:.1f} ms "
                "median step time, so there is nothing to compare it with."]
    elif top is single:
        runner_up = ranked[1]
        sentences = [f"No multi-device strategy beat `single`'s {top_ips:,.0f} {unit}; the closest, "
                     f"{_name(runner_up)}, reaches {ips[id(runner_up)].median:,.0f} {unit} "
                     f"({pr.scaling_efficiency(runner_up, single):.1%} scaling efficiency)."]
    else:
        single_ips = single.throughput().median
        sentences = [f"{_name(top)} has the highest throughput, {top_ips:,.0f} {unit}: "
                     f"{top_ips / single_ips:.2f}\u00d7 `single`'s {single_ips:,.0f} {unit}, "
                     f"{pr.scaling_efficiency(top, single):.1%} scaling efficiency on {top.device_count()}."]
    if len(ranked) > 1:
        runner_up = ranked[1]
        spreads = [ips[id(top)].stddev, ips[id(runner_up)].stddev]
        if None not in spreads and top_ips - ips[id(runner_up)].median < max(spreads):
            sentences[-1] += (f" Its lead over {_name(runner_up)} is within one standard deviation, "
                              "so their order is not settled.")
    if len(ranked) > 2:
        sentences.append(f"By {unit}: " + ", ".join(
            f"{_short_name(case, shown)} {ips[id(case)].median:,.0f}" for case in ranked) + ".")
    fastest = min(shown, key=lambda case: case.stats("step_ms").median)
    step = fastest.stats("step_ms").median
    if single is not None and fastest is not single:
        subject = "It also" if fastest is top else _name(fastest)
        sentences.append(f"{subject} has the lowest median step time, {step:.1f} ms, a "
                         f"{pr.speedup(fastest, single):.2f}\u00d7 speedup over `single`'s "
                         f"{single.stats('step_ms').median:.1f} ms.")
    elif fastest is not top:
        sentences.append(f"{_name(fastest)} has the lowest median step time, {step:.1f} ms.")
    best_phrases, one_split = [], []
    for best in sorted(pr.best_splits(cases).values(), key=pr.Case.sort_key):
        series = [case for case in cases if case.pipelined and case.ran
                  and case.series == best.series]
        name = f"{best.fields['schedule']} on {best.device_count()}"
        if len(series) == 1:
            one_split.append(f"{name} ({best.split_size})")
            continue
        worst = max(series, key=lambda case: case.stats("step_ms").median)
        best_phrases.append(f"{best.split_size} for {name} ({best.stats('step_ms').median:.1f} ms; the "
                            f"slowest, split_size {worst.split_size}, took {worst.stats('step_ms').median:.1f} ms)")
    if best_phrases:
        sentences.append(f"Pipeline's best split_size is {'; '.join(best_phrases)}.")
    if one_split:
        sentences.append(f"Pipeline ran at one split_size only for {'; '.join(one_split)}.")
    return sentences


def _short_name(case: pr.Case, shown: list[pr.Case]) -> str:
    """The strategy alone where it names one case among `shown`, else with its config."""
    return f"`{case.strategy}`" if sum(c.strategy == case.strategy for c in shown) == 1 else _name(case)


def summary_table(cases: list[pr.Case]) -> list[str]:
    shown = pr.headline_cases(cases)
    if not shown:
        return ["No case of this set-up ran."]
    single = pr.single_reference(cases)
    compared = single is not None
    rows = []
    for case in shown:
        step = case.stats("step_ms")
        best_split = ""
        if case.pipelined:  # shown at its best split
            tried = sorted(c.split_size for c in cases
                           if c.pipelined and c.ran and c.series == case.series)
            best_split = f"{case.split_size} (of {', '.join(map(str, tried))})"
        flags = [f"{count} {word}" for count, word in ((_throttled(case), "throttled"), (_stalled(case), "stalled"))
                 if count]
        above = compared and above_ideal(case, single)
        rows.append([
            case.strategy,
            case.config(),
            f"{step.count} ({', '.join(flags)})" if flags else str(step.count),
            f"{step.median:.2f}",
            _spread(step),
            f"{step.minimum:.2f}\u2013{step.maximum:.2f}",
            f"{case.throughput().median:,.1f}",
            f"{pr.speedup(case, single):.2f}\u00d7" if compared else "no single",
            (f"{pr.scaling_efficiency(case, single):.1%}" + (" (above ideal)" if above else "")) if compared
            else "no single",
            ", ".join(f"dev{device} {peak:.2f}" for device, peak in case.peak_memory_gib().items()) or "not measured",
            _mfu(case),
            _per_device(case.bubble_fractions()),
            best_split,
            _details(case),
        ])
    return _table(["strategy", "config", "reps", "step time median (ms)", "stddev (ms)", "min\u2013max (ms)",
                   f"{shown[0].setup.throughput_unit} (median)", "speedup vs single", "scaling efficiency",
                   "peak memory (GiB)", "MFU", "bubble fraction", "best split", "details"], rows)


def scaling_section(groups: dict[pr.Setup, list[pr.Case]]) -> list[str]:
    """A run at several device counts (--gpus=LIST): per set-up, each line's best case at each
    count (pr.scaling_view), and a sentence on the efficiencies at the largest count."""
    views = {setup: view for setup, cases in groups.items() if (view := pr.scaling_view(cases))}
    if not views:
        return []
    lines = ["## Scaling", "",
             "Each strategy at each GPU count, shown by its case of highest median throughput (the best "
             "pipeline schedule and split, the best ddp bucket), weak- and strong-scaling ddp apart; "
             "ideal = gpus \u00d7 single's throughput, scaling efficiency = throughput / ideal "
             "(docs/METRICS.md, \"Scaling\"). The *scaling* figure draws the same numbers.", ""]
    for setup, view in views.items():
        unit = setup.throughput_unit
        rows = [[line, str(point.gpus), f"{point.throughput:,.1f}",
                 f"{point.ideal:,.1f}" if point.ideal is not None else "no single",
                 f"{point.efficiency:.1%}" if point.efficiency is not None else "no single",
                 point.case.config() or "the whole model on one device"]
                for line, points in view.items() for point in points]
        lines += [f"### {setup.describe()}", "",
                  *_table(["strategy", "GPUs", f"{unit} (median)", f"ideal {unit}", "scaling efficiency",
                           "best case"], rows), ""]
        largest = max(point.gpus for points in view.values() for point in points)
        at_largest = [f"{line} {point.efficiency:.1%}" for line, points in view.items() for point in points
                      if point.gpus == largest and point.efficiency is not None]
        if at_largest:
            lines += [f"Scaling efficiency at {largest} GPUs: {', '.join(at_largest)}.", ""]
    return lines


def sweep_table(cases: list[pr.Case], timelines: dict[str, CaseTimeline]) -> list[str]:
    pipeline = sorted((case for case in cases if case.pipelined and case.ran),
                      key=pr.Case.sort_key)
    single = pr.single_reference(cases)
    best = set(map(id, pr.best_splits(pipeline).values()))
    rows = []
    for case in pipeline:
        step = case.stats("step_ms")
        rows.append([
            case.fields["schedule"],
            str(case.gpus),
            f"**{case.split_size}** (best)" if id(case) in best else str(case.split_size),
            str(step.count),
            f"{step.median:.2f}",
            _spread(step),
            f"{step.minimum:.2f}\u2013{step.maximum:.2f}",
            f"{case.throughput().median:,.1f}",
            f"{pr.speedup(case, single):.2f}\u00d7" if single else "no single",
            f"{case.ideal_speedup():.2f}\u00d7",
            _per_device(case.busy_fractions()),
            _per_device(case.bubble_fractions()),
            f"{case.ideal_bubble_fraction():.2f}",
            *_timeline_bubbles(timelines.get(case.name)),
        ])
    return _table(["schedule", "devices", "split_size", "reps", "step time median (ms)", "stddev (ms)",
                   "min\u2013max (ms)", f"{cases[0].setup.throughput_unit} (median)", "speedup vs single",
                   "ideal speedup S\u00b7vM/(vM+S-1)",
                   "busy fraction (measured)", "bubble fraction (measured)", "ideal bubble (S-1)/(vM+S-1)",
                   "bubble, traced step (measured)", "bubble, simulator (predicted)"], rows)


def _timeline_bubbles(timeline: CaseTimeline | None) -> list[str]:
    """The traced step's bubble per device and the simulator's (docs/METRICS.md, "Pipeline timelines")."""
    if timeline is None:
        return ["no trace", "no trace"]
    measured = _per_device(dict(enumerate(timeline.measured.bubble)))
    if timeline.predicted is None:
        return [measured, "not predicted"]
    return [measured, _per_device(dict(enumerate(timeline.predicted.timeline.bubble)))]


def prediction_preamble(results: pr.Results) -> list[str]:
    """How `parbench --advise` predicted (docs/METRICS.md, "Predicted step time")."""
    profiles = [str(run.context["advise_profile_s"]) for run in results.runs if "advise_profile_s" in run.context]
    text = ("`parbench --advise` predicted each case's step time from a short profile (the schedule "
            "simulator of docs/METRICS.md, \"Predicted step time\") and then measured the cases below; "
            "error = (predicted − measured) / measured, measured being the median step time.")
    if profiles:
        text += f" The profile took {' s, '.join(profiles)} s."
    text += (" Where a GPU run measured it, each case's peak memory on its fullest device stands beside its "
             "prediction (docs/METRICS.md, \"Predicted peak memory\"); a case whose memory alone was predicted "
             "(checkpointed) has \"-\" for its time.")
    return [text]


def _prediction_error(case: pr.Case) -> float:
    measured = case.stats("step_ms").median
    return (case.stats("predicted_step_ms").median - measured) / measured


def _memory_error(case: pr.Case) -> float | None:
    peaks = case.fullest_peaks()
    if peaks is None or peaks[1] <= 0:
        return None
    return (peaks[0] - peaks[1]) / peaks[1]


def prediction_groups(groups: dict[pr.Setup, list[pr.Case]]) -> dict[tuple, list[pr.Case]]:
    """The predicted cases that ran, as --advise ranked them: by set-up and global batch and, where
    a scaling run (--gpus=LIST) has its multi-device cases at several counts, by count, single in
    each count's group (its predicted rank then is its rank at the first count). Keys:
    (set-up, global batch, count or 0)."""
    ranked: dict[tuple, list[pr.Case]] = {}
    for setup, cases in groups.items():
        for case in cases:
            if case.ran and (case.stats("predicted_step_ms") or case.per_device("predicted_peak_gib")):
                ranked.setdefault((setup, case.global_batch()), []).append(case)
    predicted: dict[tuple, list[pr.Case]] = {}
    for (setup, global_batch), cases in ranked.items():
        counts = sorted({case.gpus for case in cases if case.strategy != "single"})
        if len(counts) < 2:
            predicted[setup, global_batch, 0] = cases
            continue
        for count in counts:
            predicted[setup, global_batch, count] = [case for case in cases
                                                     if case.gpus == count or case.strategy == "single"]
    return predicted


def prediction_table(cases: list[pr.Case]) -> list[str]:
    """One row per case; where any case has its peak memory predicted and measured (GPU runs),
    the fullest device's predicted and measured peak and their error too ("-" where a case lacks them)."""
    memory = any(case.fullest_peaks() for case in cases)
    rows = []
    for case in sorted(cases, key=lambda c: c.stats("predicted_rank").median):
        # A case with its memory predicted alone (checkpointed) has no predicted time.
        timed = case.stats("predicted_step_ms") is not None
        row = [str(int(case.stats("predicted_rank").median)), _name(case),
               f"{case.stats('predicted_step_ms').median:.2f}" if timed else "-", f"{case.stats('step_ms').median:.2f}",
               f"{_prediction_error(case):+.1%}" if timed else "-"]
        if memory:
            peaks = case.fullest_peaks()
            error = _memory_error(case)
            row += ([f"{peaks[0]:.2f}", f"{peaks[1]:.2f}"] if peaks else ["-", "-"])
            row.append(f"{error:+.1%}" if error is not None else "-")
        rows.append(row)
    headers = ["predicted rank", "case", "predicted (ms)", "measured (ms)", "error"]
    if memory:
        headers += ["predicted peak (GiB)", "measured peak (GiB)", "memory error"]
    return _table(headers, rows)


def prediction_summary(cases: list[pr.Case]) -> str:
    """The recommendation against the best measured case, the error over the pipeline cases, and
    the peak memory's error over the cases that have both peaks."""
    text = ""
    timed = [case for case in cases if case.stats("predicted_step_ms") is not None]
    if timed:
        recommended = min(timed, key=lambda c: c.stats("predicted_rank").median)
        best = min(timed, key=lambda c: c.stats("step_ms").median)
        text = (f"Recommended: {_name(recommended)}, measured {recommended.stats('step_ms').median:.2f} ms; "
                f"the best measured here is {_name(best)} at {best.stats('step_ms').median:.2f} ms "
                f"({recommended.stats('step_ms').median / best.stats('step_ms').median - 1:.1%} slower).")
    pipeline = [abs(_prediction_error(case)) for case in timed if case.pipelined]
    if pipeline:
        text += (f" Over {len(pipeline)} pipeline case(s) the mean absolute error is "
                 f"{sum(pipeline) / len(pipeline):.1%}, the largest {max(pipeline):.1%}.")
    memory = [abs(error) for error in map(_memory_error, cases) if error is not None]
    if memory:
        text += (f" Peak memory (the fullest device): over {len(memory)} case(s) the mean absolute error is "
                 f"{sum(memory) / len(memory):.1%}, the largest {max(memory):.1%}.")
    return text.strip()


def allreduce_table(cases: list[pr.Case]) -> list[str]:
    rows = []
    for case in cases:
        size = case.stats("bytes").median
        ranks = case.fields["ranks"]
        seconds = pr.Stats.of([entry["real_time"] * pr.SECONDS_PER_UNIT[entry["time_unit"]]
                               for entry in case.repetitions])
        rows.append(((int(ranks), size), [
            ranks, case.label.get("backend", ""), f"{size:,.0f} ({plot.binary_size(size)})", str(len(case.repetitions)),
            f"{seconds.median * 1e6:,.1f}", _bandwidth(case.stats("algbw_gbps").median),
            _bandwidth(case.stats("busbw_gbps").median)]))
    return _table(["ranks", "backend", "bytes", "reps", "time median (µs)", "algbw (GB/s)", "busbw (GB/s)"],
                  [cells for _, cells in sorted(rows)])


def _bandwidth(gbps: float) -> str:
    return f"{gbps:,.1f}" if gbps >= 1 else f"{gbps:.3f}"


def not_run_table(results: pr.Results) -> list[str]:
    """Skipped cases once per reason and set-up; the others, which failed in some or all
    repetitions, one by one."""
    skipped: dict[tuple[str, pr.Setup], list[pr.Case]] = {}
    rows = []
    for case in results.train_cases():
        if case.skipped:
            skipped.setdefault(("; ".join(case.reasons()), case.setup), []).append(case)
            continue
        if not case.errors:
            continue
        failed = len(case.errors)
        total = failed + len(case.repetitions)
        status = "did not run" if not case.ran else "partly ran (summarised from the rest)"
        rows.append([case.setup.describe(), case.title(), f"{failed} of {total} failed; {status}",
                     "; ".join(case.reasons())])
    lines = []
    # An interrupted run (context.interrupted, docs/JSON.md) holds the cases completed before the
    # signal: the cases after them are in no file, so "every case ran" cannot be said of it.
    for run in results.runs:
        signal = run.context.get("interrupted")
        if signal:
            lines += [f"**The run was interrupted** by {signal}: `{Path(run.path).name}` holds only the cases "
                      "completed before it; the cases after them did not run and are not listed here.", ""]
    if skipped:
        lines += ["Skipped before they started:", "",
                  *_table(["reason", "set-up", "cases"],
                          [[reason, setup.describe(), f"{len(cases)}: " + ", ".join(case.title() for case in cases)]
                           for (reason, setup), cases in skipped.items()]), ""]
    if rows:
        lines += _table(["set-up", "case", "repetitions", "reason"], rows)
    return lines or ["Every case ran."]  # an interrupted run has its line above


def environment(results: pr.Results) -> list[str]:
    rows = []
    for label, key in ENVIRONMENT_ROWS:
        cells = [label]
        for run in results.runs:
            context = run.context
            value = str(context.get(key, "unknown"))
            if key == "gpu_names":
                value = pr.describe_gpus(value)
            elif key == "git_sha" and context.get("git_dirty") == "true":
                value += " (dirty)"
            elif key == "tf32_cudnn":
                value += f" / {context.get('tf32_matmul', 'unknown')}"
            elif key == "num_cpus":
                value += f" \u00d7 {context.get('mhz_per_cpu', '?')} MHz"
            elif key == "host":
                value = str(context.get("host", context.get("host_name", "unknown")))
            cells.append(value)
        rows.append(cells)
    lines = _table(["", *(f"`{run.path}`" for run in results.runs)], rows)
    for run in results.runs:
        command = str(run.context.get("argv", "unknown"))
        fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", command)), default=0))
        lines += ["", f"Command line of `{run.path}`:", "", f"{fence}sh", command, fence]
    return lines


def _stalled(case: pr.Case) -> int:
    """How many of the case's repetitions parbench flagged `stalled` (docs/METRICS.md)."""
    return sum(1 for entry in case.repetitions if entry.get("stalled", 0) > 0)


def efficiency_allowance(case: pr.Case, single: pr.Case) -> float:
    """The noise allowed a scaling efficiency above 100%, as the console's verdict allows it
    (docs/METRICS.md, "The console and the verdict"): the two throughputs' relative spreads
    (sample standard deviation over median) summed; 0 for a side with one repetition."""
    def relative(stats: pr.Stats) -> float:
        return stats.stddev / stats.median if stats.stddev is not None and stats.median > 0 else 0.0
    return relative(case.stats("items_per_second")) + relative(single.stats("items_per_second"))


def above_ideal(case: pr.Case, single: pr.Case) -> bool:
    """Scaling efficiency above 100% beyond the noise: more than the case's devices can give."""
    return case is not single and pr.scaling_efficiency(case, single) > 1 + efficiency_allowance(case, single)


def _throttled(case: pr.Case) -> int:
    """How many of the case's repetitions parbench flagged `throttled` (docs/METRICS.md)."""
    return sum(1 for entry in case.repetitions if entry.get("throttled", 0) > 0)


_CLOCK_EVENTS = ((0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
                 (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
                 (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"), (0x100, "display_clock_setting"))


def clock_event_names(reasons: int) -> str:
    """NVML's clock-event reason bits by name, as parbench names them."""
    names = [name for bit, name in _CLOCK_EVENTS if reasons & bit]
    if reasons & ~sum(bit for bit, _ in _CLOCK_EVENTS):
        names.append("other")
    return ", ".join(names) or "none"


# The memory breakdown's columns: header and per-device counter (its stem in the counter
# table, whose unit says whether it is a count rather than GiB).
_MEMORY_COLUMNS = (
    ("parameters", "param_mem_gib"),
    ("gradients", "grad_mem_gib"),
    ("optimizer state", "optim_mem_gib"),
    ("model states", "model_state_mem_gib"),
    ("activations at peak", "activation_mem_gib"),
    ("peak allocated", "peak_mem_gib"),
    ("peak reserved", "peak_reserved_gib"),
    ("alloc retries", "alloc_retries"),
    ("OOMs", "ooms"),
)


def fit_section(results: pr.Results) -> list[str]:
    """--fit=batch runs: per case, the largest batch that trained, the next step up that ran out
    of memory, and the case's step time and throughput at that batch (docs/METRICS.md, "Will it
    fit")."""
    fitted = [case for case in results.train_cases() if case.fields.get("fit") == "batch"]
    if not fitted:
        return []
    rows = []
    for case in fitted:
        name = f"`{case.model}` {case.strategy}" + (f" ({case.config()})" if case.config() else "")
        if not case.ran:
            rows.append([name, "", "", "", "", "; ".join(case.reasons()) or "did not run"])
            continue
        first = case.repetitions[0]
        oom = first.get("fit_oom_batch")
        unit = case.setup.throughput_unit
        rows.append([name, f"{first['fit_batch']:,.0f}",
                     f"{oom:,.0f}" if oom is not None else "none up to the cap",
                     f"{case.stats('step_ms').median:,.1f}", f"{case.throughput().median:,.0f} {unit}",
                     f"{first['fit_probes']:,.0f} probes, step {first['fit_step']:,.0f}"])
    return ["## Will it fit", "",
            "Per case (`--fit=batch`): the largest batch that trained without running out of memory (images or "
            "sequences, as `--batch` counts them), the next step up that its probe showed to run out of memory, "
            "and the case's median step time and throughput at the largest batch (docs/METRICS.md, "
            "\"Will it fit\").", "",
            *_table(["case", "largest batch", "out of memory at", "step time (ms)", "throughput", "search"], rows), ""]


def memory_section(results: pr.Results) -> list[str]:
    """Per case that reported a breakdown, one row per device (ddp: rank), GiB unless a count."""
    rows = []
    for case in results.train_cases():
        if not case.ran:
            continue
        breakdown = case.memory_breakdown()
        for device, values in breakdown.items():
            cells = []
            for _, name in _MEMORY_COLUMNS:
                value = values.get(name)
                fact = case.facts.counters.get(name, "device")
                count = fact is not None and fact.unit == "count"
                cells.append("" if value is None else f"{value:,.0f}" if count else f"{value:.3f}")
            rows.append([_name(case), str(device), *cells])
    if not rows:
        return []
    return ["## Memory", "",
            "Per device (ddp: per rank), GiB: what persists between steps (parameters, their gradients and the "
            "optimizer's state, from the tensors; model states measured by the CUDA caching allocator on GPUs, "
            "their sum on CPU devices), what a step adds at its peak (activations: peak allocated minus what "
            "persists), the peak allocated and reserved, and the allocator's retries and OOMs during the case; "
            "the highest of each over the repetitions (docs/METRICS.md, \"Memory\"). Empty cells: not measured "
            "(the allocator's figures on GPUs only).", "",
            *_table(["case", "device", *(header for header, _ in _MEMORY_COLUMNS)], rows), ""]


def clocks_section(results: pr.Results) -> list[str]:
    """Per case whose GPUs were sampled: throttled repetitions and, per device, the lowest SM clock
    against its maximum, the highest temperature and power, and the clock-event reasons seen."""
    sampled = [case for case in results.train_cases() if case.ran and "throttled" in case.repetitions[0]]
    if not sampled:
        return []
    rows = []
    for case in sampled:
        per_device = []
        for device in case.per_device("sm_clock_mhz"):
            def values(name):
                return case.per_device(name).get(device, [])
            clock, top = values("sm_clock_mhz"), values("sm_clock_max_mhz")
            temperature, power = values("temperature_c"), values("power_w")
            reasons = 0
            for value in values("throttle_reasons"):
                reasons |= int(value)
            parts = [f"dev{device}: SM {min(clock):,.0f}" + (f" of {max(top):,.0f} MHz" if top else " MHz")]
            if temperature:
                parts.append(f"{max(temperature):.0f} \u00b0C")
            if power:
                parts.append(f"{max(power):,.0f} W")
            parts.append(f"reasons: {clock_event_names(reasons)}")
            per_device.append(", ".join(parts))
        throttled = _throttled(case)
        rows.append([_name(case), f"{throttled} of {len(case.repetitions)}" if throttled else "none",
                     "; ".join(per_device) or "not sampled"])
    threshold = ", ".join(sorted({run.context.get("throttle_threshold", "0.9") for run in results.runs}))
    return ["## Clocks and throttling", "",
            "Each GPU's SM clock, temperature, power and NVML clock-event reasons, sampled after each repetition "
            "(the reasons also before it), outside the timed steps. A repetition is throttled when a reason "
            "other than idle or the applications clocks was set, or the SM clock ended below "
            f"{threshold} of its maximum (`--throttle-threshold`; docs/METRICS.md, \"Clocks and throttling\"). "
            "Lowest clock, highest temperature and power over the repetitions.", "",
            *_table(["case", "throttled repetitions", "per device"], rows), ""]


def noise_section(results: pr.Results) -> list[str]:
    """With --max-noise: the relative spread each case reached, and whether it met the bound."""
    rows = []
    for case in results.train_cases():
        noise = next((entry.get("noise") for entry in case.repetitions if isinstance(entry.get("noise"), dict)), None)
        if not noise:
            continue
        rows.append([_name(case), str(noise.get("repetitions")), f"{noise.get('relative_spread', 0):.3%}",
                     f"{noise.get('max_noise', 0):.3%}",
                     "reached" if noise.get("reached") else "not reached: stopped at the maximum"])
    if not rows:
        return []
    return ["## Stopping by noise", "",
            "`--max-noise`: each case's repetitions went on until the relative standard deviation of their times "
            "was within the bound, or the maximum ran (docs/METRICS.md, \"Stopping by noise\").", "",
            *_table(["case", "repetitions", "noise reached", "bound", "outcome"], rows), ""]


def _spread(stats: pr.Stats) -> str:
    return f"{stats.stddev:.2f}" if stats.stddev is not None else "none (1 repetition)"


def _per_device(fractions: dict[int, float]) -> str:
    """A measured fraction per device (busy, bubble: docs/METRICS.md), where the run measured it."""
    return ", ".join(f"dev{device} {fraction:.2f}" for device, fraction in fractions.items()) or "not measured"


def _mfu(case: pr.Case) -> str:
    """'38.7% of 989 TFLOP/s bf16 (datasheet); 48.2% of 795 (GEMM probe)' (docs/METRICS.md, "MFU")."""
    gemm = case.stats("mfu_gemm")
    if gemm is None:
        return "not measured"
    math = case.label.get("peak_math", "")
    probe = f"{gemm.median:.1%} of {case.stats('gemm_tflops').median:,.0f} (GEMM probe)"
    datasheet = case.stats("mfu")
    if datasheet is None:
        return f"{probe}, {math}; GPU not in the datasheet table"
    return f"{datasheet.median:.1%} of {case.stats('peak_tflops').median:,.0f} TFLOP/s {math} (datasheet); {probe}"


def _details(case: pr.Case) -> str:
    """The label's facts that the name does not give (cut, backend, ...), ddp's rank spread and
    data_parallel's time to build its replicas (clone) or to broadcast and reduce (broadcast)."""
    # devices is in the config ("2 CPU devices") and the environment already.
    facts = [f"{key}={value}" for key, value in case.label.items()
             if key not in case.named_fields and key != "devices"]
    rank_spread = case.stats("step_ms_rank_spread")
    if rank_spread is not None:
        facts.append(f"rank spread {rank_spread.median:.1%}")
    if case.setup.language_model:  # the throughput column gives tokens/s: the per-sequence rate here
        facts.append(f"{case.stats('items_per_second').median:,.1f} sequences/s")
    for counter, word in (("replicate_ms", "replicate"), ("broadcast_ms", "broadcast"), ("reduce_ms", "reduce")):
        stats = case.stats(counter)
        if stats is not None:
            facts.append(f"{word} {stats.median:,.1f} ms")
    return "; ".join(facts)


def _name(case: pr.Case) -> str:
    config = case.config()
    return f"`{case.strategy}` ({config})" if config else f"`{case.strategy}`"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells):
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"
    return [line(headers), "|" + "---|" * len(headers), *map(line, rows)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path, help="folder for REPORT.md and the figures (created if missing)")
    parser.add_argument("results", nargs="+", help="parbench JSON files (--benchmark_out), and PyTorch "
                        "baseline files (benchmarks/pytorch/) to compare with")
    args = parser.parse_args(argv)
    baseline_files = [path for path in args.results if pb.is_baseline_document(path)]
    parbench_files = [path for path in args.results if path not in baseline_files]
    try:
        if not parbench_files:
            raise pr.ResultsError("no parbench JSON given, only PyTorch baselines: they are compared with parbench's cases")
        results = pr.load(parbench_files)
        baselines = [baseline for path in dict.fromkeys(baseline_files) for baseline in pb.read_baselines(path)]
    except pr.ResultsError as error:
        print(f"make_report.py: error: {error}", file=sys.stderr)
        return 2
    timelines, timeline_notes = load_timelines(results)
    with pr.staged_output(args.out_dir) as staging:
        rendered = plot.render_figures(results, staging)
        timeline_figures = draw_timeline_figures(results, timelines, staging)
        now = datetime.datetime.now(datetime.timezone.utc)
        if timelines:
            (staging / TIMELINES_FILE).write_text(
                json.dumps(timelines_document(results, timelines, now), indent=1) + "\n", encoding="utf-8")
        (staging / "REPORT.md").write_text(build_report(results, rendered, now, timelines, baselines) + "\n", encoding="utf-8")
    notes = (results.notes + timeline_notes + rendered.note_lines()
             + plot.remove_stale_figures(args.out_dir, rendered.written)
             + remove_stale_timelines(args.out_dir, timeline_figures, bool(timelines)))
    for note in notes:
        print(f"make_report.py: note: {note}", file=sys.stderr)
    print(f"wrote {args.out_dir / 'REPORT.md'}")
    return 0


def run(argv: list[str]) -> int:
    """main(), with every error one line on stderr, never a traceback: 2 for what cannot be read
    or written (MAKE_REPORT_TRACEBACK=1 adds the traceback), 1 for anything else."""
    try:
        return main(argv)
    except RecursionError:
        print("make_report.py: error: the input is nested too deeply to read", file=sys.stderr)
        return 2
    except OSError as error:
        print(f"make_report.py: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - one line, not a traceback
        if os.environ.get("MAKE_REPORT_TRACEBACK"):
            raise
        message = str(error).splitlines()[0] if str(error) else ""
        print(f"make_report.py: error: could not make the report: {type(error).__name__}"
              f"{': ' + message if message else ''}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
