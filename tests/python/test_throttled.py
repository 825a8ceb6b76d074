"""Repetitions run while a GPU was throttled (parbench's `throttled` counter and its per-device
clocks, schema 1.5.0; docs/METRICS.md, "Clocks and throttling"), and the noise rule's record
(`noise`, docs/METRICS.md "Stopping by noise"): what the report shows, and what the gate does with
--refuse-throttled. The inputs are the committed fixtures or the gate tests' documents, with the
counters added here."""
import copy
import json
import subprocess
import sys
from pathlib import Path

from scripts import REPO
from test_perf_gate import BASELINE_SAMPLES, SINGLE, benchmark_json, gate, gate_report

FIXTURES = Path(__file__).resolve().with_name("fixtures")
MAKE_REPORT = REPO / "reports" / "make_report.py"


def with_clocks(document, throttled_repetitions, reasons=0x20):
    """The document with clock counters on every train repetition (device 0), the first
    `throttled_repetitions` of each case flagged throttled with `reasons`."""
    document = copy.deepcopy(document)
    seen = {}
    for entry in document["benchmarks"]:
        if entry["run_type"] != "iteration" or entry.get("error_occurred") or not entry["name"].startswith("train/"):
            continue
        index = seen[entry["run_name"]] = seen.get(entry["run_name"], -1) + 1
        throttled = index < throttled_repetitions
        entry.update({"sm_clock_mhz_dev0": 1410.0 if throttled else 1980.0, "sm_clock_max_mhz_dev0": 1980.0,
                      "power_w_dev0": 699.0, "temperature_c_dev0": 87.0 if throttled else 61.0,
                      "throttle_reasons_dev0": float(reasons if throttled else 0), "throttled": float(throttled)})
    return document


def report(tmp_path, document):
    source = tmp_path / "run.json"
    source.write_text(json.dumps(document))
    out = tmp_path / "report"
    result = subprocess.run([sys.executable, str(MAKE_REPORT), str(out), str(source)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return (out / "REPORT.md").read_text()


def cpu_run():
    return json.loads((FIXTURES / "cpu_run.json").read_text())


def test_the_report_flags_throttled_repetitions(tmp_path):
    text = report(tmp_path, with_clocks(cpu_run(), throttled_repetitions=1))
    assert "**Throttled:**" in text
    assert "## Clocks and throttling" in text
    assert "1 of 3" in text  # the case's row: one of its three repetitions
    assert "(1 throttled)" in text  # the summary's reps column
    assert "sw_thermal_slowdown" in text
    assert "SM 1,410 of 1,980 MHz" in text


def test_a_cool_run_shows_its_clocks_without_the_flag(tmp_path):
    text = report(tmp_path, with_clocks(cpu_run(), throttled_repetitions=0))
    assert "**Throttled:**" not in text
    assert "throttled)" not in text
    assert "## Clocks and throttling" in text
    assert "reasons: none" in text


def test_a_run_without_clocks_has_no_clock_section(tmp_path):
    text = report(tmp_path, cpu_run())
    assert "Clocks and throttling" not in text
    assert "Throttled" not in text


def test_the_report_shows_the_noise_reached(tmp_path):
    document = cpu_run()
    noise = {"relative_spread": 0.0031, "max_noise": 0.005, "reached": True, "repetitions": 3,
             "min_repetitions": 3, "max_repetitions": 20}
    for entry in document["benchmarks"]:
        entry["noise"] = noise
    text = report(tmp_path, document)
    assert "## Stopping by noise" in text
    assert "0.310%" in text and "reached" in text


def gate_documents(throttled_repetitions):
    baseline = benchmark_json(BASELINE_SAMPLES)
    candidate = with_clocks(benchmark_json(BASELINE_SAMPLES), throttled_repetitions)
    return baseline, candidate


def test_the_gate_refuses_a_throttled_candidate(tmp_path, capsys):
    baseline, candidate = gate_documents(throttled_repetitions=2)
    code, result = gate_report(tmp_path, baseline, candidate, "--refuse-throttled")
    assert code == 2
    reasons = [line for line in result["unusable"] if "throttled" in line]
    assert len(reasons) == 1 and "\n" not in reasons[0]
    assert SINGLE in reasons[0] and "(2 of 10)" in reasons[0]
    assert "unusable: the candidate has 4 throttled repetition(s) in 2 benchmark(s)" in capsys.readouterr().out


def test_the_gate_passes_a_clean_candidate_with_refuse_throttled(tmp_path):
    baseline, candidate = gate_documents(throttled_repetitions=0)
    assert gate(tmp_path, baseline, candidate, "--refuse-throttled") == 0


def test_without_the_option_throttling_does_not_decide(tmp_path):
    baseline, candidate = gate_documents(throttled_repetitions=2)
    assert gate(tmp_path, baseline, candidate) == 0
