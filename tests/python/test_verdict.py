"""The console's verdict and --summary (benchmarks/output/verdict.h) against the report's own code.

parbench runs a short CPU run with every strategy; its JSON is read with parbench_results (the
report's medians, speedup, scaling efficiency, best split and noise rule: plots/parbench_results/
cases.py and reports/make_report.py's findings), and every number of the Markdown summary must be
what the report computes from the same repetitions, to the digits printed. The console must end
with the same verdict, every line within 120 columns, one line per case and no Google Benchmark
rows.
"""
import json
import os
import re
import subprocess
import sys

import pytest

from parbench_results import cases as pr
from scripts import REPO

BINARY = os.environ.get("PARBENCH_BINARY")
RUN = ["--preset=cpu", "--models=tinycnn", "--batch=4", "--image=16", "--warmup=1", "--repetitions=3",
       "--iterations=2", "--strategies=single,model_parallel,pipeline,data_parallel,ddp", "--split-sizes=1,2",
       "--schedules=gpipe,1f1b", "--allreduce=off"]
CASES = 1 + 1 + 2 * 2 + 1 + 1


def columns(line: str) -> int:
    return len(line)  # Python counts characters: "×" is one, as on a terminal


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not BINARY:
        pytest.skip("PARBENCH_BINARY is set by ctest (tests/CMakeLists.txt)")
    out = tmp_path_factory.mktemp("verdict")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    result = subprocess.run([BINARY, *RUN, f"--benchmark_out={out / 'run.json'}", "--benchmark_out_format=json",
                             f"--summary={out / 'summary.md'}"], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result, pr.load([str(out / "run.json")]), (out / "summary.md").read_text()


def summary_rows(markdown: str) -> dict[str, list[str]]:
    """The set-up table's rows, by strategy."""
    rows = {}
    for line in markdown.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0] in pr.STRATEGY_ORDER:
            rows[cells[0]] = cells
    return rows


def number(text: str) -> float:
    return float(text.replace(",", "").rstrip("x*%!"))


def test_the_summary_gives_the_reports_numbers_for_each_strategys_best_case(run):
    _, results, markdown = run
    (setup, cases), = results.by_setup().items()
    assert f"## {setup.describe()}" in markdown, markdown
    single = pr.single_reference(cases)
    rows = summary_rows(markdown)
    assert set(rows) == {"single", "model_parallel", "pipeline", "data_parallel", "ddp"}, markdown
    for strategy, cells in rows.items():
        ran = [case for case in cases if case.strategy == strategy and case.ran]
        best = max(ran, key=lambda case: case.throughput().median)
        assert cells[1].strip("`") == "/".join(
            f"{key}:{value}" for key, value in best.named_fields.items() if key not in pr._SETUP_KEYS), cells
        assert int(cells[2]) == best.stats("step_ms").count
        assert number(cells[3]) == pytest.approx(best.stats("step_ms").median, abs=0.005 + 1e-9), cells
        throughput = best.throughput().median  # printed as 2,661 from 1000 up, 35.2 below
        assert number(cells[4]) == pytest.approx(throughput, abs=(0.5 if throughput >= 1000 else 0.05) + 1e-9), cells
        assert number(cells[5]) == pytest.approx(pr.speedup(best, single), abs=0.005 + 1e-9), cells
        assert number(cells[6]) == pytest.approx(100 * pr.scaling_efficiency(best, single), abs=0.05 + 1e-9), cells
        assert cells[7] == "-"  # no peak memory on CPU devices
    assert rows["ddp"][5].endswith("*")  # weak scaling: compare throughput, not the step time
    assert "weak scaling" in markdown


def test_the_winner_and_the_noise_rule_are_the_reports(run):
    _, results, markdown = run
    (_, cases), = results.by_setup().items()
    best = {}
    for case in cases:
        if case.ran and (case.strategy not in best or case.throughput().median > best[case.strategy].throughput().median):
            best[case.strategy] = case
    ranked = sorted(best.values(), key=lambda case: case.throughput().median, reverse=True)
    top, runner_up = ranked[0], ranked[1]
    winner = re.search(r"\*\*(Winner: (\w+), .*)\*\*", markdown)
    assert winner and winner.group(2) == top.strategy, markdown
    # make_report.py's findings: "within one standard deviation" when the lead is below the larger spread.
    within = top.throughput().median - runner_up.throughput().median < max(top.throughput().stddev,
                                                                          runner_up.throughput().stddev)
    assert f"its lead over {runner_up.strategy} " in winner.group(1)
    assert ("within the noise" if within else "beyond the noise") in winner.group(1), winner.group(1)


def test_the_best_split_per_schedule_is_the_reports(run):
    _, results, markdown = run
    (_, cases), = results.by_setup().items()
    for best in pr.best_splits(cases).values():
        schedule = best.fields["schedule"]
        row = re.search(rf"^\| {re.escape(schedule)} \| (\d+) \| ([\d.]+) \| (\d+) \|$", markdown, re.M)
        assert row, markdown
        assert int(row.group(1)) == best.split_size
        assert float(row.group(2)) == pytest.approx(best.stats("step_ms").median, abs=0.005 + 1e-9)
        assert int(row.group(3)) == 2


def test_the_console_has_one_line_per_case_and_ends_with_the_verdict(run):
    result, _, _ = run
    lines = result.stdout.splitlines()
    assert all(columns(line) <= 120 for line in lines), result.stdout
    assert "Iterations" not in result.stdout and "_median" not in result.stdout, result.stdout
    verdict = next(i for i, line in enumerate(lines) if line.startswith("Verdict for "))
    case_lines = [line for line in lines[:verdict] if line.startswith("  ") and not line.startswith("    ^ ")]
    assert len(case_lines) == CASES, result.stdout
    assert lines[verdict - 1] == ""
    assert any(line.startswith("  Winner: ") for line in lines[verdict:]), result.stdout
    assert lines[-1].startswith("  * weak scaling"), result.stdout
    # The verdict is the summary's: the same winner sentence.
    assert "Best pipeline split per schedule: gpipe " in result.stdout


def test_verbose_prints_google_benchmarks_rows_and_the_verdict(tmp_path):
    if not BINARY:
        pytest.skip("PARBENCH_BINARY is set by ctest (tests/CMakeLists.txt)")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    result = subprocess.run([BINARY, "--preset=cpu", "--models=tinycnn", "--batch=4", "--image=16", "--warmup=1",
                             "--repetitions=2", "--iterations=2", "--strategies=single", "--verbose"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "_median" in result.stdout and "Iterations" in result.stdout, result.stdout
    assert "Only single ran" in result.stdout, result.stdout


@pytest.mark.parametrize("path, why", [("/dev/null", "a character device, not a regular file"),
                                       ("{tmp}", "is a directory"),
                                       ("{tmp}/absent/summary.md", "No such file or directory")])
def test_a_summary_that_cannot_be_written_is_refused_before_the_run(tmp_path, path, why):
    if not BINARY:
        pytest.skip("PARBENCH_BINARY is set by ctest (tests/CMakeLists.txt)")
    path = path.format(tmp=tmp_path)
    result = subprocess.run([BINARY, "--preset=cpu", "--strategies=single", f"--summary={path}"],
                            capture_output=True, text=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""), timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr  # one line
    assert f"cannot write --summary={path}" in result.stderr and why in result.stderr, result.stderr


# ---- The report's flags (reports/make_report.py), from the GPU fixtures -----------------------------

FIXTURES = REPO / "tests" / "python" / "fixtures"
SINGLE_FP32 = "train/single/resnet50/batch:120/image:128/precision:fp32/data:device/manual_time"
DDP_ON = "train/ddp/resnet50/batch:120/image:128/precision:fp32/data:device/gpus:2/bucket_mib:25/overlap:on/scaling:weak"


def report_of(tmp_path, change=None):
    """REPORT.md of the GPU fixtures, each file's JSON first passed through change(document)."""
    files = []
    for name in ("gpu_run.json", "gpu_run_ddp.json"):
        document = json.loads((FIXTURES / name).read_text())
        if change:
            change(document)
        (tmp_path / name).write_text(json.dumps(document))
        files.append(tmp_path / name)
    result = subprocess.run([sys.executable, str(REPO / "reports" / "make_report.py"), str(tmp_path / "out"),
                             *map(str, files)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return (tmp_path / "out" / "REPORT.md").read_text(encoding="utf-8")


def summary_row(markdown, run_name_part):
    """The fp32 summary table's row (cells) of the case whose config the run name's part names."""
    block = markdown.split("\n## Summary\n", 1)[1].split("\n## ", 1)[0]
    fp32 = block.split("### resnet50, batch 120, image 128\u00d7128, fp32, data on device\n", 1)[1].split("\n### ", 1)[0]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in fp32.splitlines()
            if line.startswith("|")]
    header = rows[0]
    return [dict(zip(header, row)) for row in rows[2:] if run_name_part(row)]


def test_the_report_flags_neither_where_nothing_stalled_and_scaling_is_below_ideal(tmp_path):
    markdown = report_of(tmp_path)
    assert "**Stalled:**" not in markdown and "**Above ideal scaling:**" not in markdown
    assert "above ideal" not in markdown and "stalled)" not in markdown


def test_the_report_flags_stalled_repetitions_and_efficiency_above_ideal(tmp_path):
    def change(document):
        first = True
        for entry in document["benchmarks"]:
            if entry["run_type"] != "iteration":
                continue
            if entry["run_name"] == SINGLE_FP32:  # single slowed to half: ddp's efficiency about 194%
                entry["items_per_second"] /= 2
            if entry["run_name"].startswith(DDP_ON + "/") and first:
                entry["stalled"] = 1
                first = False

    markdown = report_of(tmp_path, change)
    assert "**Stalled:** 1 repetition(s) of 1 case(s)" in markdown, markdown[:2000]
    above = next(line for line in markdown.splitlines() if line.startswith("**Above ideal scaling:** "))
    assert "`ddp` (2 GPUs, bucket 25 MiB, overlap on, weak scaling, per-rank batch 120) 194.3% (noise allows" in above
    assert "`single`" not in above.split(" More than the devices")[0]
    ddp = summary_row(markdown, lambda row: row[0] == "ddp" and "overlap on" in row[1])
    assert len(ddp) == 1, markdown
    assert ddp[0]["reps"] == "3 (1 stalled)"
    assert ddp[0]["scaling efficiency"].endswith("% (above ideal)"), ddp[0]
    efficiency = float(ddp[0]["scaling efficiency"].split("%")[0])
    assert efficiency == pytest.approx(100 * 1115.2416 / (2 * 573.8881 / 2), abs=0.06)
    # The other ddp case, also above ideal now, and single itself: single is never flagged.
    single = summary_row(markdown, lambda row: row[0] == "single")
    assert "above ideal" not in single[0]["scaling efficiency"]
