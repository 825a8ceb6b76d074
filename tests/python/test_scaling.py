"""The scaling view of a run at several device counts (parbench --gpus=LIST): each strategy's best
case per count, ddp's weak and strong scaling apart, the ideal and the scaling efficiency, in the
report's Scaling table and the scaling figure; and a CPU run of the binary at --gpus=1,2 feeding
them. Expected numbers are computed here from fixed medians, apart from parbench_results."""
import json
import os
import subprocess

import pytest

from parbench_results import cases as pr
from parbench_results import plot
from test_plots_report import MAKE_REPORT, PLOT, assert_figure, number, run, section, tables

SETUP = "resnet50, batch 120, image 128\u00d7128, fp32, data on device"
PREFIX = "train/{}/resnet50/batch:120/image:128/precision:fp32/data:device"
SINGLE_IPS = 1000.0
# name suffix (after the set-up) -> median images/s; three repetitions each, around it.
SCALING_RUN = {
    ("single", ""): SINGLE_IPS,
    ("model_parallel", "/gpus:2"): 900.0,
    ("model_parallel", "/gpus:4"): 1100.0,
    ("pipeline", "/gpus:2/split:20/schedule:gpipe"): 1500.0,
    ("pipeline", "/gpus:2/split:20/schedule:1f1b"): 1700.0,  # the best at 2
    ("pipeline", "/gpus:2/split:40/schedule:1f1b"): 1600.0,
    ("pipeline", "/gpus:4/split:20/schedule:gpipe"): 2600.0,  # the best at 4
    ("pipeline", "/gpus:4/split:20/schedule:1f1b"): 2500.0,
    ("data_parallel", "/gpus:2"): 1800.0,
    ("data_parallel", "/gpus:4"): 3600.0,
    ("ddp", "/gpus:1/bucket_mib:25/overlap:on/scaling:weak"): 990.0,
    ("ddp", "/gpus:2/bucket_mib:25/overlap:on/scaling:weak"): 1960.0,
    ("ddp", "/gpus:2/bucket_mib:100/overlap:on/scaling:weak"): 1980.0,  # the best weak at 2
    ("ddp", "/gpus:4/bucket_mib:25/overlap:on/scaling:weak"): 3880.0,
    ("ddp", "/gpus:1/bucket_mib:25/overlap:on/scaling:strong"): 995.0,
    ("ddp", "/gpus:2/bucket_mib:25/overlap:on/scaling:strong"): 1800.0,
    ("ddp", "/gpus:4/bucket_mib:25/overlap:on/scaling:strong"): 3000.0,
}
# line -> {gpus: the best case's median images/s}
EXPECTED = {
    "single": {1: 1000.0},
    "model_parallel": {2: 900.0, 4: 1100.0},
    "pipeline": {2: 1700.0, 4: 2600.0},
    "data_parallel": {2: 1800.0, 4: 3600.0},
    "ddp strong": {1: 995.0, 2: 1800.0, 4: 3000.0},
    "ddp weak": {1: 990.0, 2: 1980.0, 4: 3880.0},
}
BEST = {("pipeline", 2): "schedule:1f1b", ("pipeline", 4): "schedule:gpipe", ("ddp weak", 2): "bucket_mib:100"}


def write_run(path, medians, gpus="NVIDIA H100 80GB HBM3;" * 3 + "NVIDIA H100 80GB HBM3", predictions=None):
    """A parbench JSON (schema 1.1.0: fields from the names) with three repetitions per case,
    images/s of median, median - 1% and median + 1%; `predictions`: (strategy, rest) ->
    (predicted_step_ms, predicted_rank) as --advise gives them."""
    entries = []
    for (strategy, rest), ips in medians.items():
        name = PREFIX.format(strategy) + rest + "/manual_time"
        for factor in (0.99, 1.0, 1.01):
            entries.append({"name": name, "run_name": name, "run_type": "iteration", "repetitions": 3,
                            "iterations": 10, "real_time": 1.0, "cpu_time": 1.0, "time_unit": "ms",
                            "items_per_second": ips * factor, "step_ms": 120e3 / (ips * factor),
                            "label": "devices=cuda"})
            if predictions and (strategy, rest) in predictions:
                entries[-1]["predicted_step_ms"], entries[-1]["predicted_rank"] = predictions[strategy, rest]
    context = {"parbench_json_schema": "1.1.0", "devices": "cuda", "gpu_count": "4", "gpu_names": gpus,
               "git_sha": "0123456789abcdef", "git_dirty": "false", "argv": "--gpus=1,2,4"}
    path.write_text(json.dumps({"context": context, "benchmarks": entries}))
    return path


def test_each_line_keeps_its_best_case_per_count_and_ddp_modes_apart(tmp_path):
    cases = pr.load([str(write_run(tmp_path / "run.json", SCALING_RUN))]).by_setup()
    (view,) = [pr.scaling_view(c) for c in cases.values()]
    assert list(view) == list(EXPECTED)  # strategy order, ddp's modes apart
    for line, points in view.items():
        assert {p.gpus: pytest.approx(p.throughput) for p in points} == EXPECTED[line], line
        for point in points:
            # efficiency = throughput / (gpus x single's throughput), from the medians alone
            assert point.ideal == pytest.approx(point.gpus * SINGLE_IPS)
            assert point.efficiency == pytest.approx(EXPECTED[line][point.gpus] / (point.gpus * SINGLE_IPS))
            if (line, point.gpus) in BEST:
                assert BEST[line, point.gpus] in point.case.name, (line, point.gpus)


def test_one_count_has_no_scaling_view_figure_or_section(tmp_path):
    one_count = {key: ips for key, ips in SCALING_RUN.items() if "/gpus:4" not in key[1] and "/gpus:1" not in key[1]}
    path = write_run(tmp_path / "run.json", one_count)
    assert all(not pr.scaling_view(c) for c in pr.load([str(path)]).by_setup().values())
    out = tmp_path / "report"
    result = run(MAKE_REPORT, out, [path])
    assert result.returncode == 0, result.stderr
    report = (out / "REPORT.md").read_text(encoding="utf-8")
    assert "## Scaling" not in report and "scaling figure" not in report.lower()
    assert not (out / "scaling.png").exists()
    assert "scaling" not in result.stderr


def test_report_scaling_table_gives_the_best_cases_ideal_and_efficiency(tmp_path):
    out = tmp_path / "report"
    result = run(MAKE_REPORT, out, [write_run(tmp_path / "run.json", SCALING_RUN)])
    assert result.returncode == 0, result.stderr
    report = (out / "REPORT.md").read_text(encoding="utf-8")
    rows = tables(report, "Scaling")[SETUP]
    assert [(r["strategy"], int(r["GPUs"])) for r in rows] == [
        (line, gpus) for line, points in EXPECTED.items() for gpus in points]
    for r in rows:
        line, gpus = r["strategy"], int(r["GPUs"])
        assert number(r["images/s (median)"]) == pytest.approx(EXPECTED[line][gpus], rel=1e-3)
        assert number(r["ideal images/s"]) == pytest.approx(gpus * SINGLE_IPS, rel=1e-3)
        assert number(r["scaling efficiency"]) == pytest.approx(100 * EXPECTED[line][gpus] / (gpus * SINGLE_IPS),
                                                                abs=0.05)
    assert [r for r in rows if r["strategy"] == "pipeline" and r["GPUs"] == "2"][0]["best case"].startswith(
        "2 GPUs, 1f1b, split 20")
    assert "Scaling efficiency at 4 GPUs: model_parallel 27.5%, pipeline 65.0%, data_parallel 90.0%, " \
           "ddp strong 75.0%, ddp weak 97.0%." in section(report, "Scaling")
    assert "![Throughput (images/s) and scaling efficiency against the GPU count, with the ideal](scaling.png)" \
        in report
    for extension in ("png", "svg"):
        assert_figure(out / f"scaling.{extension}")


def test_scaling_figure_draws_the_tables_numbers_and_the_ideal(tmp_path):
    results = pr.load([str(write_run(tmp_path / "run.json", SCALING_RUN))])
    figures, rendered = plot.draw_figures(results)
    assert "scaling" in figures and "scaling" not in rendered.skipped
    left, right = figures["scaling"].axes[:2]
    lines = {line.get_label(): line for line in left.get_lines()}
    assert list(lines)[0].startswith("ideal")
    ideal = lines.pop(list(lines)[0])
    assert list(ideal.get_xdata()) == [1, 2, 4]
    assert list(ideal.get_ydata()) == pytest.approx([1000.0, 2000.0, 4000.0])
    assert set(lines) == set(EXPECTED)
    for name, line in lines.items():
        assert dict(zip(line.get_xdata(), line.get_ydata())) == pytest.approx(EXPECTED[name]), name
    efficiencies = [dict(zip(line.get_xdata(), line.get_ydata())) for line in right.get_lines()
                    if len(line.get_xdata()) and line.get_linestyle() != ":"]
    expected = [{gpus: 100 * ips / (gpus * SINGLE_IPS) for gpus, ips in points.items()} for points in EXPECTED.values()]
    assert efficiencies == [pytest.approx(e) for e in expected]
    assert right.get_lines()[0].get_ydata()[0] == 100  # the ideal efficiency
    assert left.get_xscale() == "log" and [t.get_text() for t in left.get_xticklabels()] == ["1", "2", "4"]
    assert "Scaling" in figures["scaling"]._suptitle.get_text()


def test_plot_writes_the_scaling_figure_only_for_several_counts(tmp_path):
    result = run(PLOT, tmp_path / "figures", [write_run(tmp_path / "run.json", SCALING_RUN)])
    assert result.returncode == 0, result.stderr
    assert_figure(tmp_path / "figures" / "scaling.png")


def test_predictions_of_a_scaling_run_are_compared_per_count(tmp_path):
    # --advise ranks each count apart, single in each: the report's tables and errors follow.
    medians = {("single", ""): 1000.0, ("pipeline", "/gpus:2/split:20/schedule:gpipe"): 1500.0,
               ("pipeline", "/gpus:2/split:20/schedule:1f1b"): 1600.0,
               ("pipeline", "/gpus:4/split:20/schedule:gpipe"): 2400.0,
               ("pipeline", "/gpus:4/split:20/schedule:1f1b"): 3000.0}
    measured = {key: 120e3 / ips for key, ips in medians.items()}  # the median step_ms
    errors = {("pipeline", "/gpus:2/split:20/schedule:gpipe"): 0.10, ("pipeline", "/gpus:2/split:20/schedule:1f1b"): -0.02,
              ("pipeline", "/gpus:4/split:20/schedule:gpipe"): 0.04, ("pipeline", "/gpus:4/split:20/schedule:1f1b"): -0.06}
    predictions = {("single", ""): (measured["single", ""], 3)}
    for rank, key in enumerate(sorted(errors, key=lambda key: (key[1][:7], -medians[key]))):
        predictions[key] = (measured[key] * (1 + errors[key]), rank % 2 + 1)
    out = tmp_path / "report"
    result = run(MAKE_REPORT, out, [write_run(tmp_path / "run.json", medians, predictions=predictions)])
    assert result.returncode == 0, result.stderr
    blocks = section((out / "REPORT.md").read_text(encoding="utf-8"), "Predicted vs measured").split("\n### ")[1:]
    assert [block.splitlines()[0] for block in blocks] == [f"{SETUP}, 2 GPUs", f"{SETUP}, 4 GPUs"]
    for block, count, mean, largest in ((blocks[0], 2, 6.0, 10.0), (blocks[1], 4, 5.0, 6.0)):
        assert "`single`" in block  # the reference, in every count's ranking
        assert f"Over 2 pipeline case(s) the mean absolute error is {mean:.1f}%, the largest {largest:.1f}%." in block
        assert f"Recommended: `pipeline` ({count} GPUs, 1f1b, split 20)" in block


BINARY = os.environ.get("PARBENCH_BINARY")
SMALL = ["--models=tinycnn", "--batch=4", "--image=16", "--warmup=1", "--iterations=2", "--repetitions=2",
         "--allreduce=off", "--schedules=gpipe", "--split-sizes=2", "--dp-replicate=broadcast"]


@pytest.mark.skipif(not BINARY, reason="PARBENCH_BINARY names no binary (ctest sets it)")
def test_a_cpu_run_at_two_counts_feeds_the_scaling_table_and_figure(tmp_path):
    out = tmp_path / "run.json"
    # On CPU devices wherever it runs: a GPU machine's count of GPUs would decide what is skipped.
    result = subprocess.run([BINARY, "--gpus=1,2", "--scaling=weak,strong", *SMALL, f"--benchmark_out={out}"],
                            capture_output=True, text=True, check=False, timeout=400,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    ran = {entry["run_name"]: entry["fields"] for entry in document["benchmarks"] if entry["run_type"] == "iteration"}
    counts = {(fields["strategy"], fields.get("scaling", ""), fields.get("gpus", 1)) for fields in ran.values()}
    assert document["context"]["devices"] == "cpu"
    assert counts == {("single", "", 1), ("model_parallel", "", 2), ("pipeline", "", 2), ("data_parallel", "", 2),
                      ("ddp", "weak", 1), ("ddp", "weak", 2), ("ddp", "strong", 1), ("ddp", "strong", 2)}
    report_dir = tmp_path / "report"
    report = run(MAKE_REPORT, report_dir, [out])
    assert report.returncode == 0, report.stderr
    rows = tables((report_dir / "REPORT.md").read_text(encoding="utf-8"), "Scaling")
    (setup_rows,) = rows.values()
    assert [(r["strategy"], r["GPUs"]) for r in setup_rows] == [
        ("single", "1"), ("model_parallel", "2"), ("pipeline", "2"), ("data_parallel", "2"),
        ("ddp strong", "1"), ("ddp strong", "2"), ("ddp weak", "1"), ("ddp weak", "2")]
    assert all(number(r["scaling efficiency"]) > 0 for r in setup_rows)
    assert_figure(report_dir / "scaling.png")
