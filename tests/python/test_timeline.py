"""Tests parbench_results.pipeline_timeline (parbench-timeline), parbench_results.timeline_plot and the report's pipeline timelines:
on real CPU traces that parbench wrote (fixtures/traces/, fixtures/README.md), on a GPU trace
built here in the shape of Kineto's output with hand-worked bubbles, and on traces a fresh
`parbench --trace` run writes for every schedule."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from parbench_results import pipeline_timeline as pt
from parbench_results import timeline_plot
from parbench_results.facts import legacy_schedule_facts

SCHEDULE_FACTS = legacy_schedule_facts()  # the fixtures' files predate schema 1.8.0's schedule_facts

REPO = Path(__file__).resolve().parents[2]
TRACES = Path(__file__).resolve().with_name("fixtures") / "traces"
MAKE_REPORT = REPO / "reports" / "make_report.py"
SCHEDULES = ("tutorial", "gpipe", "1f1b", "interleaved-1f1b", "zb-h1")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
LABEL = re.compile(r"^(?P<op>[FBW])(?P<micro_batch>\d+|\*) stage(?P<stage>\d+)$")



def fixture(schedule):
    """The fixture run's trace of `schedule`, its predicted timeline's path and the run's results
    file."""
    run = TRACES / "run.json"
    for entry in json.loads(run.read_text())["benchmarks"]:
        if f"schedule:{schedule}/" in entry["run_name"] and "label" in entry:
            trace = TRACES / re.search(r"trace=([^;]*)", entry["label"]).group(1)
            return trace, pt.predicted_path(trace), run
    raise AssertionError(f"no {schedule} case in {run}")


def labelled_ranges(events):
    """Range name -> the threads it ran on, for the schedule's actions."""
    found = {}
    for event in events:
        if event.get("ph") == "X" and LABEL.match(str(event.get("name"))):
            found.setdefault(event["name"], set()).add(event["tid"])
    return found


def expected_actions(schedule, devices=2, micro_batches=2, chunks=2):
    """The labels a step of `schedule` must hold: every stage's forward and backward of every
    micro-batch (zb-h1 adds W, the tutorial's last stage B* around its backwards)."""
    stages = devices * chunks if schedule == "interleaved-1f1b" else devices
    names = {f"{op}{m} stage{s}" for s in range(stages) for m in range(micro_batches) for op in "FB"}
    if schedule == "zb-h1":
        names |= {f"W{m} stage{s}" for s in range(stages) for m in range(micro_batches)}
    if schedule == "tutorial":
        names.add(f"B* stage{stages - 1}")
    return names


# --- real traces (fixtures/traces/) --------------------------------------------------------

@pytest.mark.parametrize("schedule", SCHEDULES)
def test_real_trace_is_chrome_json_with_every_action_labelled(schedule):
    trace, predicted, _ = fixture(schedule)
    document = json.loads(trace.read_text())
    assert isinstance(document["traceEvents"], list)
    ranges = labelled_ranges(document["traceEvents"])
    assert expected_actions(schedule) <= set(ranges)
    # Each device's actions on one thread of their own (stage s on device s mod 2).
    threads = {device: set().union(*(tids for name, tids in ranges.items()
                                     if int(LABEL.match(name)["stage"]) % 2 == device)) for device in (0, 1)}
    assert len(threads[0]) == 1 and len(threads[1]) == 1 and threads[0] != threads[1]
    assert predicted.is_file()


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_spans_of_a_real_trace(schedule):
    trace, _, _ = fixture(schedule)
    timeline = pt.measured_timeline(pt.read_trace(trace), 2, str(trace))
    assert timeline.source == pt.SOURCE_HOST
    actions = {f"{span.op}{'*' if span.micro_batch is None else span.micro_batch} stage{span.stage}"
               for span in timeline.spans if span.op != pt.UPDATE_OP}
    # zb-h1's B on the first stage has no input gradient to compute: it runs nothing.
    idle = {f"B{m} stage0" for m in range(2)} if schedule == "zb-h1" else set()
    assert actions == expected_actions(schedule) - idle
    assert {span.stage for span in timeline.spans if span.op == pt.UPDATE_OP} == set(
        range(4 if schedule == "interleaved-1f1b" else 2))
    for span in timeline.spans:
        assert span.device == span.stage % 2 and span.lane == 0
        assert 0 <= span.start_ms < span.end_ms <= timeline.step_ms + 1e-9
        assert all(span.start_ms <= start <= end <= span.end_ms for start, end in span.busy)
    assert min(span.start_ms for span in timeline.spans) == 0
    # Stage 1 cannot start a micro-batch's forward before stage 0 has finished it.
    by_name = {(span.op, span.micro_batch, span.stage): span for span in timeline.spans}
    for m in range(2):
        assert by_name[("F", m, 1)].start_ms >= by_name[("F", m, 0)].end_ms - 1e-9
    for value in timeline.bubble:
        assert 0 < value < 1
    # The bubble is the device's share of the step outside its actions' work, recomputed here.
    for device in (0, 1):
        busy = sorted(interval for span in timeline.spans if span.device == device for interval in span.busy)
        total, until = 0.0, 0.0
        for start, end in busy:
            total += max(0.0, end - max(start, until))
            until = max(until, end)
        assert timeline.bubble[device] == pytest.approx(1 - total / timeline.step_ms)


def test_host_spans_leave_out_the_wait_for_a_neighbour():
    """Stage 1's first forward waits in its mailbox for stage 0's activation: its host range
    covers the wait, its span (the host ops it ran) does not."""
    trace, _, _ = fixture("gpipe")
    events = pt.read_trace(trace)
    host_range = next(event for event in events if event.get("name") == "F0 stage1")
    span = next(s for s in pt.measured_timeline(events, 2).spans if (s.op, s.micro_batch, s.stage) == ("F", 0, 1))
    assert span.end_ms - span.start_ms < float(host_range["dur"]) / 1000


# --- a GPU trace in the shape of Kineto's, bubbles worked by hand ---------------------------

def gpu_trace_events():
    """A two-stage gpipe step of 2 micro-batches on GPUs, as Kineto writes it (libkineto's
    output_json.cpp): host ranges on two stage threads, CUDA runtime launches inside them, and
    the kernels and copies they launched, linked by `correlation`. Times in µs."""
    pid, stage0, stage1 = 1000, 101, 102
    events = []

    def host(tid, name, start, end):
        events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": pid, "tid": tid,
                       "ts": start, "dur": end - start})

    def launch(tid, at, correlation, start, end, stream, category="kernel"):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid,
                       "ts": at, "dur": 2, "args": {"cbid": 211, "correlation": correlation}})
        events.append({"ph": "X", "cat": category, "name": "kernel", "pid": 0, "tid": stream, "ts": start,
                       "dur": end - start, "args": {"device": 0, "stream": stream, "correlation": correlation}})

    host(stage0, "F0 stage0", 0, 100)
    launch(stage0, 10, 1, 20, 220, 7)
    host(stage0, "send activation0 stage0->1", 80, 95)  # its copy is the send's, not F0's
    launch(stage0, 85, 2, 220, 240, 20, "gpu_memcpy")
    host(stage0, "F1 stage0", 100, 150)
    launch(stage0, 110, 3, 220, 420, 7)
    host(stage0, "B1 stage0", 150, 200)
    launch(stage0, 190, 4, 1000, 1400, 7)
    host(stage0, "B0 stage0", 200, 250)
    launch(stage0, 210, 5, 1400, 1800, 7)
    host(stage0, "optimizer stage0", 250, 260)
    launch(stage0, 255, 6, 1800, 1900, 7)
    launch(stage0, 400, 7, 1950, 1960, 7)  # outside every range: not the schedule's work
    host(stage1, "F0 stage1", 0, 300)
    launch(stage1, 250, 11, 250, 450, 13)
    host(stage1, "F1 stage1", 300, 320)
    # A kernel whose launch is missing: found through the host op that launched it.
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": stage1, "ts": 302, "dur": 8,
                   "args": {"External id": 500}})
    events.append({"ph": "X", "cat": "kernel", "name": "kernel", "pid": 0, "tid": 13, "ts": 450, "dur": 200,
                   "args": {"device": 0, "stream": 13, "correlation": 999, "External id": 500}})
    host(stage1, "B1 stage1", 320, 340)
    launch(stage1, 325, 13, 650, 850, 13)
    # Its launch recorded under another thread id: found through the host op around it.
    events[-2]["tid"] = 7777
    events[-1]["args"]["External id"] = 600
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": stage1, "ts": 324, "dur": 4,
                   "args": {"External id": 600}})
    host(stage1, "B0 stage1", 340, 360)
    launch(stage1, 345, 14, 850, 1000, 14)  # a second lane
    host(stage1, "optimizer stage1", 360, 370)
    launch(stage1, 365, 15, 1000, 1100, 13)
    return events


def test_gpu_spans_come_from_the_kernels_each_action_launched():
    timeline = pt.measured_timeline(gpu_trace_events(), 2)
    assert timeline.source == pt.SOURCE_DEVICE
    spans = {(s.op, s.micro_batch, s.stage): s for s in timeline.spans}
    assert len(spans) == len(timeline.spans) == 10
    # From the first kernel (F0 stage0's, at 20 µs) on, in ms.
    assert (spans[("F", 0, 0)].start_ms, spans[("F", 0, 0)].end_ms) == pytest.approx((0.0, 0.2))  # no send copy
    assert (spans[("F", 1, 1)].start_ms, spans[("F", 1, 1)].end_ms) == pytest.approx((0.43, 0.63))
    assert (spans[("U", None, 0)].start_ms, spans[("U", None, 0)].end_ms) == pytest.approx((1.78, 1.88))
    assert timeline.lanes == {0: 1, 1: 2}
    assert spans[("B", 0, 1)].lane == 1 and spans[("B", 1, 1)].lane == 0


def test_gpu_bubble_worked_by_hand():
    # Step: 20 µs (first kernel) to 1900 µs (stage 0's update) = 1880 µs.
    # Device 0 busy: 20-420 and 1000-1900 = 1300 µs; device 1: 250-1100 = 850 µs.
    timeline = pt.measured_timeline(gpu_trace_events(), 2)
    assert timeline.step_ms == pytest.approx(1.88)
    assert timeline.bubble == pytest.approx([1 - 1300 / 1880, 1 - 850 / 1880])


def test_covered_counts_overlaps_once():
    assert pt.covered([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == pytest.approx(4)
    assert pt.covered([]) == 0


@pytest.mark.parametrize("schedule, devices, micro_batches, chunks, expected", [
    ("gpipe", 2, 4, 1, 1 / 5),        # (S-1)/(M+S-1)
    ("1f1b", 4, 8, 1, 3 / 11),
    ("interleaved-1f1b", 2, 4, 2, 1 / 9),  # (S-1)/(vM+S-1)
    ("zb-h1", 2, 4, 1, 1 / 13),       # (S-1)/(3M+S-1)
])
def test_ideal_bubble(schedule, devices, micro_batches, chunks, expected):
    assert pt.ideal_bubble(SCHEDULE_FACTS[schedule], devices, micro_batches, chunks) == pytest.approx(expected)


def test_a_trace_without_labelled_actions_is_refused(tmp_path):
    path = tmp_path / "single.trace.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "forward",
                                                 "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}))
    with pytest.raises(pt.TimelineError, match="no schedule action is labelled"):
        pt.measured_timeline(pt.read_trace(path), 2, str(path))
    path.write_text("{not json")
    with pytest.raises(pt.TimelineError, match="not valid JSON"):
        pt.read_trace(path)


def test_cli_prints_spans_and_exits_2_on_bad_input(tmp_path):
    trace, _, _ = fixture("1f1b")
    command = [sys.executable, "-m", "parbench_results.pipeline_timeline"]  # parbench-timeline
    good = subprocess.run([*command, str(trace)], capture_output=True, text=True)
    assert good.returncode == 0, good.stderr
    assert "F0 stage0" in good.stdout and "bubble dev0" in good.stdout
    bad = tmp_path / "bad.trace.json"
    bad.write_text("[]")
    result = subprocess.run([*command, str(bad)], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "bad.trace.json" in result.stderr


# --- predicted timeline and figure ----------------------------------------------------------

def test_predicted_timeline_reads_the_simulator_file():
    _, predicted_file, _ = fixture("1f1b")
    document = json.loads(predicted_file.read_text())
    predicted = pt.predicted_timeline(predicted_file)
    assert predicted.schedule == "1f1b" and predicted.micro_batches == 2
    assert predicted.timeline.bubble == document["bubble_fraction"]
    assert len(predicted.timeline.spans) == len(document["actions"]) == 8
    assert {(s.op, s.micro_batch, s.stage) for s in predicted.timeline.spans} == {
        (op, m, s) for op in "FB" for m in range(2) for s in range(2)}


def test_figure_is_drawn_with_both_panels_and_a_row_per_device_and_lane(tmp_path):
    measured = pt.measured_timeline(gpu_trace_events(), 2)
    predicted_file = tmp_path / "case.predicted.json"
    predicted_file.write_text(json.dumps({
        "case": "test", "schedule": "gpipe", "devices": 2, "micro_batches": 2, "chunks": 1, "step_ms": 1.7,
        "bubble_fraction": [0.3, 0.5],
        "actions": [{"device": s, "stage": s, "op": op, "micro_batch": m, "start_ms": start, "end_ms": start + 0.2}
                    for s, op, m, start in ((0, "F", 0, 0.0), (0, "F", 1, 0.2), (1, "F", 0, 0.25), (1, "F", 1, 0.45),
                                            (1, "B", 1, 0.65), (1, "B", 0, 0.85), (0, "B", 1, 1.1), (0, "B", 0, 1.3))]}))
    predicted = pt.predicted_timeline(predicted_file)
    figure = timeline_plot.draw_timeline("test", measured, predicted, SCHEDULE_FACTS["gpipe"], 1 / 3)
    measured_ax, predicted_ax = figure.axes
    assert [label.get_text() for label in measured_ax.get_yticklabels()] == [
        f"device 0\nbubble {measured.bubble[0]:.2f}", f"device 1 lane 0\nbubble {measured.bubble[1]:.2f}",
        "device 1 lane 1"]
    assert len(predicted_ax.get_yticklabels()) == 2
    assert measured_ax.get_xlim() == predicted_ax.get_xlim()
    # Labelled by micro-batch where wide enough: every measured bar here is.
    assert sorted(text.get_text() for text in measured_ax.texts) == sorted("0011" "0011")
    path = tmp_path / "timeline.png"
    figure.savefig(path)
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    # A prediction 10x the measured step would leave the measured bars a sliver: an axis each.
    document = json.loads(predicted_file.read_text())
    document["step_ms"] *= 10
    for action in document["actions"]:
        action["start_ms"], action["end_ms"] = action["start_ms"] * 10, action["end_ms"] * 10
    predicted_file.write_text(json.dumps(document))
    figure = timeline_plot.draw_timeline("test", measured, pt.predicted_timeline(predicted_file), SCHEDULE_FACTS["gpipe"], 1 / 3)
    measured_ax, predicted_ax = figure.axes
    assert predicted_ax.get_xlim()[1] == pytest.approx(10 * measured_ax.get_xlim()[1] * 1.7 / 1.88)
    assert "on its own time axis" in predicted_ax.get_title(loc="left")


# --- the report -----------------------------------------------------------------------------

def run_report(out_dir, files):
    return subprocess.run([sys.executable, str(MAKE_REPORT), str(out_dir), *map(str, files)],
                          capture_output=True, text=True, check=False)


def test_report_draws_timelines_and_writes_timelines_json(tmp_path):
    runs = [TRACES / "run.json"]
    result = run_report(tmp_path, runs)
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "REPORT.md").read_text()
    assert "\n## Pipeline timelines\n" in report
    document = json.loads((tmp_path / "timelines.json").read_text())
    assert document["parbench_timelines_schema"] == "1.0.0"
    assert document["meta"]["results"] == [str(path) for path in runs]
    by_schedule = {entry["schedule"]: entry for entry in document["timelines"]}
    assert set(by_schedule) == set(SCHEDULES)
    for schedule, entry in by_schedule.items():
        trace, predicted_file, _ = fixture(schedule)
        timeline = pt.measured_timeline(pt.read_trace(trace), 2)
        assert entry["measured_bubble_fraction"] == pytest.approx(timeline.bubble, abs=1e-6)
        assert entry["ideal_bubble_fraction"] == pytest.approx(
            pt.ideal_bubble(SCHEDULE_FACTS[schedule], 2, 2, 2 if schedule == "interleaved-1f1b" else 1), abs=1e-6)
        assert entry["predicted_bubble_fraction"] == pytest.approx(
            json.loads(predicted_file.read_text())["bubble_fraction"], abs=1e-6)
        assert (tmp_path / entry["figure"]).read_bytes().startswith(PNG_SIGNATURE)
        assert f"]({entry['figure']})" in report
        # The split sweep's row shows the same bubbles.
        row = next(line for line in report.split("\n## Pipeline split sweep\n")[1].splitlines()
                   if line.startswith(f"| {schedule} |"))
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[-2] == ", ".join(f"dev{d} {v:.2f}" for d, v in enumerate(timeline.bubble))
        assert cells[-1] == ", ".join(f"dev{d} {v:.2f}" for d, v in enumerate(entry["predicted_bubble_fraction"]))


def test_report_without_traces_has_no_timelines_and_removes_old_ones(tmp_path):
    (tmp_path / "timeline_old.png").write_bytes(b"x")
    (tmp_path / "timelines.json").write_text("{}")
    result = run_report(tmp_path, [REPO / "tests" / "python" / "fixtures" / "cpu_run_strategies.json"])
    assert result.returncode == 0, result.stderr
    assert "Pipeline timelines" not in (tmp_path / "REPORT.md").read_text()
    assert not (tmp_path / "timeline_old.png").exists() and not (tmp_path / "timelines.json").exists()


def test_report_notes_a_missing_trace_and_goes_on(tmp_path):
    run_file = tmp_path / "run.json"
    document = json.loads(fixture("gpipe")[2].read_text())
    for entry in document["benchmarks"]:
        if "label" in entry:
            entry["label"] = re.sub(r"trace=[^;]*", "trace=/nonexistent/x.trace.json", entry["label"])
    run_file.write_text(json.dumps(document))
    result = run_report(tmp_path / "out", [run_file])
    assert result.returncode == 0, result.stderr
    assert "x.trace.json is not there" in result.stderr
    assert "no trace" in (tmp_path / "out" / "REPORT.md").read_text()


def test_report_figure_says_why_a_case_has_no_prediction(tmp_path, monkeypatch):
    """A case on two lanes has no prediction (the simulator gives a device one stream), and its
    figure says so; a case on one lane whose prediction is missing says that instead."""
    sys.path.insert(0, str(REPO / "reports"))
    try:
        import make_report
    finally:
        sys.path.remove(str(REPO / "reports"))
    trace, _, run = fixture("1f1b")
    (tmp_path / trace.name).write_bytes(trace.read_bytes())  # without its .predicted.json
    document = json.loads(run.read_text())
    document["benchmarks"] = [entry for entry in document["benchmarks"] if "/schedule:1f1b" in entry["run_name"]]
    lanes_1 = json.loads(json.dumps(document))
    for entry in document["benchmarks"]:
        for key in ("name", "run_name"):
            entry[key] = entry[key].replace("/schedule:1f1b", "/schedule:1f1b/lanes:2")
    notes = {}
    draw = timeline_plot.draw_timeline

    def recording(title, measured, predicted, schedule, ideal, note=""):
        notes[title] = (predicted, note)
        return draw(title, measured, predicted, schedule, ideal, note)

    monkeypatch.setattr(make_report.timeline_plot, "draw_timeline", recording)
    for lanes, results in (("2", document), ("1", lanes_1)):
        run_file = tmp_path / f"run_lanes_{lanes}.json"
        run_file.write_text(json.dumps(results))
        notes.clear()
        assert make_report.main([str(tmp_path / f"report_{lanes}"), str(run_file)]) == 0
        [(predicted, note)] = notes.values()
        assert predicted is None
        if lanes == "2":
            assert "ran on 2 lanes" in note and "one compute stream" in note, note
        else:
            assert "no <case>.predicted.json beside the trace" in note, note


# --- a fresh run of the binary --------------------------------------------------------------

def parbench_binary():
    """The binary ctest passes (PARBENCH_BINARY), else build/parbench."""
    return Path(os.environ.get("PARBENCH_BINARY", REPO / "build" / "parbench"))


@pytest.mark.skipif(not parbench_binary().exists(), reason="no parbench binary: build it (ci/build.sh)")
def test_parbench_trace_for_every_schedule(tmp_path):
    traces = tmp_path / "traces"
    out = tmp_path / "run.json"
    result = subprocess.run(
        [str(parbench_binary()), "--preset=cpu", "--models=tinycnn", "--batch=4", "--image=16", "--warmup=1",
         "--repetitions=1", "--iterations=1", "--strategies=pipeline", "--split-sizes=2",
         f"--schedules={','.join(SCHEDULES)}", f"--trace={traces}", f"--benchmark_out={out}",
         "--benchmark_out_format=json"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    entries = [entry for entry in json.loads(out.read_text())["benchmarks"] if entry["run_type"] == "iteration"]
    assert len(entries) == len(SCHEDULES)
    for entry in entries:
        schedule = re.search(r"schedule:([\w-]+)", entry["run_name"]).group(1)
        trace = Path(re.search(r"trace=([^;]*)", entry["label"]).group(1))
        events = pt.read_trace(trace)
        assert expected_actions(schedule) <= set(labelled_ranges(events))
        predicted = pt.predicted_timeline(pt.predicted_path(trace))
        assert predicted.schedule == schedule
        assert {(span.op, span.micro_batch, span.stage) for span in predicted.timeline.spans} == {
            (label[0], int(label[1]), int(label.split("stage")[1])) for label in expected_actions(schedule)
            if not label.startswith("B*")}
        timeline = pt.measured_timeline(events, 2, str(trace))
        assert all(0 < value < 1 for value in timeline.bubble)
    report = run_report(tmp_path / "report", [out])
    assert report.returncode == 0, report.stderr
    entries = json.loads((tmp_path / "report" / "timelines.json").read_text())["timelines"]
    assert sorted(entry["schedule"] for entry in entries) == sorted(SCHEDULES)
    for entry in entries:
        assert len(entry["predicted_bubble_fraction"]) == 2, entry["schedule"]
        assert entry["predicted_step_ms"] > 0, entry["schedule"]
