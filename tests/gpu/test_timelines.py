"""Traced pipelines (docs/METRICS.md, "Pipeline timelines"): every schedule, both stages on GPU
0, timed without and with --trace; each traced case leaves a trace and the simulator's predicted
timeline beside it, which parbench_results.pipeline_timeline reads with the measured one."""
from pathlib import Path

from parbench_results import pipeline_timeline

from conftest import needs_gpus

SCHEDULES = ("tutorial", "gpipe", "1f1b", "interleaved-1f1b", "zb-h1")


@needs_gpus(1)
def test_every_schedule_is_traced_with_its_prediction(run, tmp_path):
    common = ("--strategies=single,pipeline", "--precision=fp32", f"--schedules={','.join(SCHEDULES)}", "--chunks=2",
              "--split-sizes=20", "--devices=0,0", "--repetitions=3", "--benchmark_min_time=0.1")
    plain = run("untraced", *common)
    traced = run("traced", *common, f"--trace={tmp_path / 'traces'}")
    assert plain.status == 0 and traced.status == 0, (plain.last_line(), traced.last_line())
    pipelines = [case for case in traced.results.train_cases() if case.pipelined]
    assert sorted(case.fields["schedule"] for case in pipelines) == sorted(SCHEDULES)
    for case in pipelines:
        trace = Path(case.label["trace"])
        assert trace.is_file(), f"{case.name}: no trace"
        predicted = pipeline_timeline.predicted_timeline(pipeline_timeline.predicted_path(trace))
        devices = predicted.timeline.devices
        measured = pipeline_timeline.measured_timeline(pipeline_timeline.read_trace(trace), devices, str(trace))
        assert predicted.timeline.step_ms > 0 and measured.step_ms > 0
        assert len(measured.bubble) == devices and all(0 <= bubble < 1 for bubble in measured.bubble)
        # The traced step is one extra step outside the timed ones: the timed steps agree with
        # the untraced run's within the run-to-run spread of eager pipelines (docs/METRICS.md).
        untimed = plain.case(f"/schedule:{case.fields['schedule']}/")
        ratio = case.stats("step_ms").median / untimed.stats("step_ms").median
        assert 0.5 < ratio < 2, f"{case.name}: traced/untraced {ratio:.2f}"
