"""Tests plots/plot.py and reports/make_report.py against the hand-written fixtures in fixtures/
(parbench JSON as docs/JSON.md defines it). Expected numbers are computed here from the fixtures'
per-repetition entries, independently of plots/parbench_results.py."""
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().with_name("fixtures")
PLOT = REPO / "plots" / "plot.py"
MAKE_REPORT = REPO / "reports" / "make_report.py"
GPU_RUN = [FIXTURES / "gpu_run.json", FIXTURES / "gpu_run_ddp.json"]
CPU_RUN = [FIXTURES / "cpu_run.json"]
BAD_FILES = ["malformed.json", "empty.json", "schema_v2.json", "not_parbench.json"]
FIGURES = ["step_time", "split_size", "throughput", "memory"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

FP32 = "resnet50, batch 120, image 128\u00d7128, fp32, data on device"
BF16 = "resnet50, batch 120, image 128\u00d7128, bf16, data on device"
SINGLE = "train/single/resnet50/batch:120/image:128/precision:{}/data:device/manual_time"
MULTI = "train/{}/resnet50/batch:120/image:128/precision:{}/data:device/gpus:2/manual_time"
DDP = ("train/ddp/resnet50/batch:120/image:128/precision:fp32/data:device/gpus:2/bucket_mib:25/"
       "overlap:{}/scaling:weak/repeats:3/manual_time")


def run(script, out_dir, files):
    return subprocess.run([sys.executable, str(script), str(out_dir), *map(str, files)],
                          capture_output=True, text=True, check=False)


def repetitions(files):
    """run_name -> the per-repetition entries that ran, straight from the JSON."""
    found = {}
    for path in files:
        for entry in json.loads(Path(path).read_text())["benchmarks"]:
            if entry["run_type"] == "iteration" and not entry.get("error_occurred"):
                found.setdefault(entry["run_name"], []).append(entry)
    return found


def median(entries, counter):
    return statistics.median(entry[counter] for entry in entries)


def number(cell):
    """The first number in a table cell: '1,052.6' -> 1052.6, '1.54\u00d7' -> 1.54."""
    return float(re.search(r"\d[\d,]*(\.\d+)?", cell).group().replace(",", ""))


def section(markdown, title):
    return markdown.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def tables(markdown, title):
    """'### set-up' heading -> the rows (header -> cell) of its table, in one '## title' section."""
    found = {}
    for block in section(markdown, title).split("\n### ")[1:]:
        heading, *lines = block.splitlines()
        rows = [re.split(r"(?<!\\)\|", line.strip())[1:-1] for line in lines if line.startswith("|")]
        header = [cell.strip() for cell in rows[0]]
        found[heading] = [dict(zip(header, (cell.strip() for cell in row))) for row in rows[2:]]
    return found


def row(rows, strategy, config_part=""):
    matches = [r for r in rows if r["strategy"] == strategy and config_part in r["config"]]
    assert len(matches) == 1, (strategy, config_part, rows)
    return matches[0]


@pytest.fixture(scope="module")
def gpu_report(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("gpu_report")
    result = run(MAKE_REPORT, out_dir, GPU_RUN)
    assert result.returncode == 0, result.stderr
    return out_dir, (out_dir / "REPORT.md").read_text(encoding="utf-8"), result


def assert_figure(path):
    data = path.read_bytes()
    assert len(data) > 1000, path
    if path.suffix == ".png":
        assert data.startswith(PNG_SIGNATURE), path
    else:
        assert b"<svg" in data[:2000], path


def test_plot_writes_every_figure_for_a_gpu_run(tmp_path):
    result = run(PLOT, tmp_path, GPU_RUN)
    assert result.returncode == 0, result.stderr
    for name in FIGURES:
        for extension in ("png", "svg"):
            assert_figure(tmp_path / f"{name}.{extension}")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"{name}.{extension}" for name in FIGURES for extension in ("png", "svg"))
    # The skipped cases and the one-repetition case are named, never drawn as data.
    assert "CUDA out of memory" in result.stderr
    assert "NCCL error" in result.stderr
    assert "1 repetition" in result.stderr


def test_plot_skips_figures_without_data_on_a_cpu_run(tmp_path):
    result = run(PLOT, tmp_path, CPU_RUN)
    assert result.returncode == 0, result.stderr
    for name in ("step_time", "throughput"):
        for extension in ("png", "svg"):
            assert_figure(tmp_path / f"{name}.{extension}")
    assert not list(tmp_path.glob("memory.*"))
    assert not list(tmp_path.glob("split_size.*"))
    assert "memory: no case that ran has peak_mem_gib_dev<i> counters" in result.stderr
    assert "split_size: no pipeline case ran" in result.stderr
    assert "needs 2 GPUs, 0 visible" in result.stderr


def test_plot_removes_figures_an_earlier_run_left(tmp_path):
    assert run(PLOT, tmp_path, GPU_RUN).returncode == 0
    result = run(PLOT, tmp_path, CPU_RUN)
    assert result.returncode == 0, result.stderr
    assert not list(tmp_path.glob("memory.*"))
    assert (tmp_path / "step_time.png").exists()


def test_report_writes_report_and_figures(gpu_report):
    out_dir, report, _ = gpu_report
    for name in FIGURES:
        assert f"]({name}.png)" in report
        for extension in ("png", "svg"):
            assert_figure(out_dir / f"{name}.{extension}")
    assert not [p for p in out_dir.iterdir() if p.name.startswith(".")], "staging left behind"


def test_summary_matches_values_computed_from_the_fixtures(gpu_report):
    _, report, _ = gpu_report
    reps = repetitions(GPU_RUN)
    summary = tables(report, "Summary")
    for precision, heading in (("fp32", FP32), ("bf16", BF16)):
        single = reps[SINGLE.format(precision)]
        single_step, single_ips = median(single, "step_ms"), median(single, "items_per_second")
        for strategy in ("model_parallel", "data_parallel"):
            name = MULTI.format(strategy, precision)
            if name not in reps:
                continue
            entries = reps[name]
            cells = row(summary[heading], strategy)
            assert number(cells["reps"]) == len(entries)
            assert number(cells["step time median (ms)"]) == pytest.approx(median(entries, "step_ms"), abs=0.005)
            assert number(cells["speedup vs single"]) == pytest.approx(
                single_step / median(entries, "step_ms"), abs=0.005)
            assert number(cells["scaling efficiency"]) == pytest.approx(
                100 * median(entries, "items_per_second") / (2 * single_ips), abs=0.05)
            assert number(cells["images/s (median)"]) == pytest.approx(median(entries, "items_per_second"), abs=0.05)
            if len(entries) > 1:
                assert number(cells["stddev (ms)"]) == pytest.approx(
                    statistics.stdev(e["step_ms"] for e in entries), abs=0.005)
            else:
                assert "1 repetition" in cells["stddev (ms)"]


def test_data_parallel_memory_shows_device_0_extra_load(gpu_report):
    _, report, _ = gpu_report
    entries = repetitions(GPU_RUN)[MULTI.format("data_parallel", "fp32")]
    cell = row(tables(report, "Summary")[FP32], "data_parallel")["peak memory (GiB)"]
    peaks = {int(device): float(value) for device, value in re.findall(r"dev(\d+) ([\d.]+)", cell)}
    for device in (0, 1):
        assert peaks[device] == pytest.approx(max(e[f"peak_mem_gib_dev{device}"] for e in entries), abs=0.005)
    assert peaks[0] > peaks[1]


def test_data_parallel_details_give_the_replication_time(gpu_report):
    _, report, _ = gpu_report
    entries = repetitions(GPU_RUN)[MULTI.format("data_parallel", "fp32")]
    cell = row(tables(report, "Summary")[FP32], "data_parallel")["details"]
    assert number(cell.split("replicate", 1)[1]) == pytest.approx(median(entries, "replicate_ms"), abs=0.05)


def test_allreduce_table_gives_medians_per_size(gpu_report):
    _, report, _ = gpu_report
    found = {name: entries for name, entries in repetitions(GPU_RUN).items() if name.startswith("comm/allreduce/")}
    assert found
    rows = [re.split(r"(?<!\\)\|", line.strip())[1:-1] for line in section(report, "All-reduce").splitlines()
            if line.startswith("|")]
    header = [cell.strip() for cell in rows[0]]
    table = [dict(zip(header, (cell.strip() for cell in cells))) for cells in rows[2:]]
    assert len(table) == len(found)
    for entries, cells in zip(found.values(), table):
        assert number(cells["bytes"]) == entries[0]["bytes"]
        assert cells["reps"] == str(len(entries))
        assert number(cells["time median (\u00b5s)"]) == pytest.approx(median(entries, "real_time") * 1e3, abs=0.05)
        assert number(cells["busbw (GB/s)"]) == pytest.approx(median(entries, "busbw_gbps"), abs=0.05)
        assert number(cells["algbw (GB/s)"]) == pytest.approx(median(entries, "algbw_gbps"), abs=0.05)
    assert "comm/allreduce case(s)" not in report  # summarised, not just counted


def test_weak_scaling_ddp_compares_with_single_at_the_per_rank_batch(gpu_report):
    _, report, _ = gpu_report
    reps = repetitions(GPU_RUN)
    single = reps[SINGLE.format("fp32")]
    for overlap in ("on", "off"):
        entries = reps[DDP.format(overlap)]
        cells = row(tables(report, "Summary")[FP32], "ddp", f"overlap {overlap}")
        assert number(cells["scaling efficiency"]) == pytest.approx(
            100 * median(entries, "items_per_second") / (2 * median(single, "items_per_second")), abs=0.05)
        assert number(cells["speedup vs single"]) == pytest.approx(
            median(single, "step_ms") / median(entries, "step_ms"), abs=0.005)


def pipeline_medians(files, precision):
    """schedule -> {split_size: median step_ms}, from the fixture's pipeline names."""
    found = {}
    for name, entries in repetitions(files).items():
        match = re.match(rf"train/pipeline/.*precision:{precision}/.*split:(\d+)/schedule:(\w+)", name)
        if match:
            found.setdefault(match.group(2), {})[int(match.group(1))] = median(entries, "step_ms")
    return found


def test_best_split_per_schedule(gpu_report):
    _, report, _ = gpu_report
    summary, sweep = tables(report, "Summary"), tables(report, "Pipeline split sweep")
    for precision, heading in (("fp32", FP32), ("bf16", BF16)):
        for schedule, by_split in pipeline_medians(GPU_RUN, precision).items():
            best = min(by_split, key=by_split.get)
            cells = row(summary[heading], "pipeline", schedule)
            assert number(cells["best split"]) == best
            assert f"split {best}" in cells["config"]
            marked = [r for r in sweep[heading] if r["schedule"] == schedule and "best" in r["split_size"]]
            assert [number(r["split_size"]) for r in marked] == [best]
            assert len([r for r in sweep[heading] if r["schedule"] == schedule]) == len(by_split)
    # The fixtures are built so that the schedules' best splits differ.
    assert {s: min(m, key=m.get) for s, m in pipeline_medians(GPU_RUN, "fp32").items()} == {"gpipe": 20, "1f1b": 40}


def test_findings_are_generated_from_the_data(gpu_report):
    _, report, _ = gpu_report
    findings = section(report, "Findings")
    reps = repetitions(GPU_RUN)
    fp32 = {name: entries for name, entries in reps.items() if "precision:fp32" in name}
    top = max(fp32, key=lambda name: median(fp32[name], "items_per_second"))
    single_ips = median(reps[SINGLE.format("fp32")], "items_per_second")
    ratio = median(fp32[top], "items_per_second") / single_ips
    line = next(line for line in findings.splitlines() if FP32 in line)
    assert line.split("**: ", 1)[1].startswith(f"`{top.split('/')[1]}`")
    assert f"{ratio:.2f}\u00d7" in line
    for schedule, by_split in pipeline_medians(GPU_RUN, "fp32").items():
        assert f"{min(by_split, key=by_split.get)} for {schedule}" in line


def test_report_lists_cases_that_did_not_run(gpu_report):
    _, report, _ = gpu_report
    did_not_run = section(report, "Cases that did not run")
    for path in GPU_RUN:
        for entry in json.loads(path.read_text())["benchmarks"]:
            if entry.get("error_occurred"):
                assert entry["error_message"] in did_not_run


def test_report_environment(gpu_report):
    _, report, _ = gpu_report
    environment = section(report, "Environment")
    for path in GPU_RUN:
        context = json.loads(path.read_text())["context"]
        assert context["argv"] in environment
        assert context["date"] in environment
    assert "2\u00d7 NVIDIA H100 80GB HBM3" in environment


def test_report_on_a_cpu_run(tmp_path):
    result = run(MAKE_REPORT, tmp_path, CPU_RUN)
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "REPORT.md").read_text(encoding="utf-8")
    assert "(memory.png)" not in report and "(split_size.png)" not in report
    assert "No `memory` figure" in report
    assert "needs 2 GPUs, 0 visible" in section(report, "Cases that did not run")
    cells = row(tables(report, "Summary")["tinycnn, batch 32, image 64\u00d764, fp32, data on host"], "single")
    assert cells["peak memory (GiB)"] == "not measured"


def test_repetitions_of_one_case_in_two_files_are_pooled(tmp_path):
    copy = tmp_path / "cpu_run_again.json"
    copy.write_text(CPU_RUN[0].read_text())
    out_dir = tmp_path / "out"
    result = run(MAKE_REPORT, out_dir, CPU_RUN + [copy, copy])
    assert result.returncode == 0, result.stderr
    assert "pooled" in result.stderr and "more than once" in result.stderr
    report = (out_dir / "REPORT.md").read_text(encoding="utf-8")
    cells = row(tables(report, "Summary")["tinycnn, batch 32, image 64\u00d764, fp32, data on host"], "single")
    assert number(cells["reps"]) == 6


@pytest.mark.parametrize("script", [PLOT, MAKE_REPORT], ids=["plot", "make_report"])
@pytest.mark.parametrize("bad", BAD_FILES)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, script, bad):
    out_dir = tmp_path / "out"
    # The bad file after a good one: nothing may be written before every file is checked.
    result = run(script, out_dir, CPU_RUN + [FIXTURES / bad])
    assert result.returncode == 2
    message = result.stderr.strip()
    assert message and "\n" not in message, result.stderr
    assert bad in message
    assert not out_dir.exists()


def test_bad_input_leaves_an_existing_folder_as_it_was(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    result = run(MAKE_REPORT, tmp_path, [FIXTURES / "schema_v2.json"])
    assert result.returncode == 2
    assert "major version 2" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_failure_while_writing_leaves_no_report(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO / "reports"))
    try:
        import make_report
    finally:
        sys.path.remove(str(REPO / "reports"))

    def fail(*_):
        raise RuntimeError("injected")

    monkeypatch.setattr(make_report, "build_report", fail)
    out_dir = tmp_path / "out"
    with pytest.raises(RuntimeError, match="injected"):
        make_report.main([str(out_dir), *map(str, GPU_RUN)])
    assert not out_dir.exists()


def test_bubble_fractions_are_medians_and_ideal_follows_stages_and_micro_batches():
    sys.path.insert(0, str(REPO / "plots"))
    try:
        import parbench_results as pr
    finally:
        sys.path.remove(str(REPO / "plots"))
    case = next(c for c in pr.load([str(FIXTURES / "gpu_run.json")]).train_cases()
                if c.strategy == "pipeline" and c.split_size == 20 and c.ran)
    for index, entry in enumerate(case.repetitions):
        entry["bubble_frac_dev0"] = 0.1 * (index + 1)
        entry["bubble_frac_dev1"] = 0.5
    median_dev0 = statistics.median(0.1 * (i + 1) for i in range(len(case.repetitions)))
    assert case.bubble_fractions() == pytest.approx({0: median_dev0, 1: 0.5})
    # 2 stages, 120 images in micro-batches of 20: M = 6, (S-1)/(M+S-1) = 1/7.
    assert case.ideal_bubble_fraction() == pytest.approx(1 / 7)


def with_graph_copies(path, out_path, speedup):
    """The file, plus a "/graph:on" copy of its fp32 single and ddp entries, `speedup` times faster."""
    data = json.loads(Path(path).read_text())
    copies = []
    for entry in data["benchmarks"]:
        if not re.match(r"train/(single|ddp)/.*precision:fp32/", entry["name"]):
            continue
        copy = dict(entry)
        for key in ("name", "run_name"):
            copy[key] = re.sub(r"(/repeats:\d+)?/manual_time", r"/graph:on\g<0>", entry[key], count=1)
        for counter in ("step_ms", "real_time", "cpu_time"):
            if counter in copy:
                copy[counter] = entry[counter] / speedup
        if "items_per_second" in copy:
            copy["items_per_second"] = entry["items_per_second"] * speedup
        copies.append(copy)
    assert copies
    data["benchmarks"] += copies
    out_path.write_text(json.dumps(data))
    return out_path


def test_cuda_graph_cases_compare_with_single_under_a_graph(tmp_path):
    files = [with_graph_copies(GPU_RUN[0], tmp_path / "gpu_run.json", 1.25),
             with_graph_copies(GPU_RUN[1], tmp_path / "gpu_run_ddp.json", 1.6)]
    out_dir = tmp_path / "out"
    result = run(MAKE_REPORT, out_dir, files)
    assert result.returncode == 0, result.stderr
    report = (out_dir / "REPORT.md").read_text(encoding="utf-8")
    summary = tables(report, "Summary")
    graphed = summary[FP32 + ", CUDA graph"]
    assert {r["strategy"] for r in graphed} == {"single", "ddp"}
    reps = repetitions(files)
    single = reps[SINGLE.format("fp32").replace("/manual_time", "/graph:on/manual_time")]
    ddp = reps[DDP.format("on").replace("/repeats", "/graph:on/repeats")]
    cells = row(graphed, "ddp", "overlap on")
    assert number(cells["speedup vs single"]) == pytest.approx(
        median(single, "step_ms") / median(ddp, "step_ms"), abs=0.005)
    # The cases without a graph still compare with single without one.
    eager = row(summary[FP32], "ddp", "overlap on")
    assert number(eager["speedup vs single"]) == pytest.approx(
        median(reps[SINGLE.format("fp32")], "step_ms") / median(reps[DDP.format("on")], "step_ms"), abs=0.005)
