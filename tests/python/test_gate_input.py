"""What the gate refuses to judge (exit 2, one line): repetitions without an integer index or
given twice, a case under two run names, files that are not regular or too large, values of
the wrong JSON type, CPU runs on another CPU or at other thread counts, stalled repetitions with
--refuse-stalled (docs/PERF_GATE.md)."""
import copy
import json
import os
import subprocess
import sys
import time

import pytest

from parbench_results import perf_gate
from scripts import REPO
from test_perf_gate import BASELINE_SAMPLES, DDP, SINGLE, benchmark_json, gate, gate_report, scaled, write

GATE = REPO / "ci" / "perf-gate"


def run_gate(*arguments, timeout=60):
    """ci/perf-gate as CI runs it, this checkout's package first."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plots"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(GATE), *arguments], capture_output=True, text=True, check=False,
                          env=env, timeout=timeout)


def unusable_lines(result):
    return [line for line in result.stdout.splitlines() if line.startswith("unusable: ")]


def iterations(document, name):
    return [entry for entry in document["benchmarks"] if entry["run_type"] == "iteration" and entry["run_name"] == name]


# Repetitions: keyed on (case, integer repetition index).

@pytest.mark.parametrize("index, shown", [(None, "has no repetition_index"), (0.0, "repetition_index 0.0:"),
                                          ("0", 'repetition_index "0":'), (-1, "repetition_index -1:"),
                                          (True, "repetition_index true:")],
                         ids=["absent", "float", "string", "negative", "boolean"])
def test_a_repetition_index_that_is_not_a_whole_number_is_unusable(tmp_path, index, shown):
    candidate = benchmark_json(BASELINE_SAMPLES)
    entry = iterations(candidate, SINGLE)[0]
    if index is None:
        del entry["repetition_index"]
    else:
        entry["repetition_index"] = index
    baseline = write(tmp_path, "baseline.json", benchmark_json(BASELINE_SAMPLES))
    result = run_gate(baseline, write(tmp_path, "candidate.json", candidate))
    assert result.returncode == 2
    [line] = unusable_lines(result)
    assert shown in line and SINGLE in line


def test_a_second_run_appended_at_other_iterations_is_unusable(tmp_path, capsys):
    # The candidate's case 2x slower, with the baseline's run of it (at --iterations=20, so under
    # another run name) appended: pooled by case, the median would hide the slowdown.
    baseline = benchmark_json(BASELINE_SAMPLES)
    candidate = benchmark_json(scaled(BASELINE_SAMPLES, 2.0))
    appended = copy.deepcopy(iterations(baseline, SINGLE))
    for entry in appended:
        entry["name"] = entry["run_name"] = f"{SINGLE}/iterations:20/manual_time"
    candidate["benchmarks"] += appended
    assert gate(tmp_path, baseline, candidate) == 2
    out = capsys.readouterr().out
    assert f"the case {SINGLE} appears under two run names, {SINGLE} " in out
    assert f"and {SINGLE}/iterations:20/manual_time" in out


def test_a_repetition_given_twice_under_one_run_name_is_unusable(tmp_path, capsys):
    candidate = benchmark_json(BASELINE_SAMPLES)
    candidate["benchmarks"].append(copy.deepcopy(iterations(candidate, DDP)[3]))
    assert gate(tmp_path, benchmark_json(BASELINE_SAMPLES), candidate) == 2
    assert f"repeats {DDP} repetition_index 3" in capsys.readouterr().out


# Files: regular ones only, of a bounded size.

def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "candidate.json"
    os.mkfifo(fifo)
    baseline = write(tmp_path, "baseline.json", benchmark_json(BASELINE_SAMPLES))
    started = time.monotonic()
    result = run_gate(baseline, str(fifo), timeout=30)
    assert result.returncode == 2
    assert time.monotonic() - started < 20
    [line] = unusable_lines(result)
    assert "not a regular file" in line


def test_a_fifo_in_a_window_folder_is_refused_without_waiting(tmp_path):
    folder = tmp_path / "history"
    folder.mkdir()
    (folder / "old.json").write_text(json.dumps(benchmark_json(BASELINE_SAMPLES, context={"git_sha": "a" * 40})))
    os.mkfifo(folder / "stuck.json")
    candidate = write(tmp_path, "candidate.json", benchmark_json(BASELINE_SAMPLES))
    result = run_gate("--window", str(folder), candidate, timeout=30)
    assert result.returncode == 2
    [line] = unusable_lines(result)
    assert "stuck.json: not a regular file" in line


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_an_endless_device_is_not_read(tmp_path):
    baseline = write(tmp_path, "baseline.json", benchmark_json(BASELINE_SAMPLES))
    result = run_gate(baseline, "/dev/zero", timeout=30)
    assert result.returncode == 2
    [line] = unusable_lines(result)
    assert line == "unusable: /dev/zero: not a regular file (a FIFO, device or folder): only files are read"


def test_a_folder_is_not_a_run(tmp_path):
    baseline = write(tmp_path, "baseline.json", benchmark_json(BASELINE_SAMPLES))
    assert run_gate(baseline, str(tmp_path)).returncode == 2


def test_a_file_larger_than_the_cap_is_refused(tmp_path, capsys, monkeypatch):
    run = benchmark_json(BASELINE_SAMPLES)
    size = len(json.dumps(run))
    monkeypatch.setattr(perf_gate, "MAX_INPUT_BYTES", size - 1)
    assert gate(tmp_path, run, run) == 2
    assert f"{size} bytes, more than the {size - 1} this reader takes" in capsys.readouterr().out
    monkeypatch.setattr(perf_gate, "MAX_INPUT_BYTES", size)
    assert gate(tmp_path, run, run) == 0


# Types.

@pytest.mark.parametrize("field, value", [("error_occurred", "false"), ("error_occurred", 0),
                                          ("throttled", "1"), ("stalled", True)])
def test_a_flag_of_the_wrong_json_type_is_malformed(tmp_path, capsys, field, value):
    candidate = benchmark_json(BASELINE_SAMPLES)
    iterations(candidate, SINGLE)[2][field] = value
    code, report = gate_report(tmp_path, benchmark_json(BASELINE_SAMPLES), candidate)
    assert code == 2
    [reason] = report["unusable"]
    assert f"has {field} {json.dumps(value)}" in reason
    assert report["errors"] == []  # not counted as an errored repetition


# The CPU and its threads, on runs without GPUs.

CPU = {"gpu_count": "0", "gpu_names": "none", "cuda_version": "none", "devices": "cpu", "cpu_model": "AMD EPYC",
       "num_cpus": 2, "intra_op_threads": "2", "omp_num_threads": "unset", "mkl_num_threads": "unset"}


@pytest.mark.parametrize("key, value", [("intra_op_threads", "1"), ("omp_num_threads", "1"),
                                        ("threads_per_device", "1"), ("cpu_model", "Intel Xeon"), ("num_cpus", 4)])
def test_a_cpu_run_on_another_cpu_or_thread_count_is_refused(tmp_path, capsys, key, value):
    baseline = benchmark_json(BASELINE_SAMPLES, context={**CPU, "threads_per_device": "2"})
    # Fewer threads, and faster: judged, it would read "improved".
    candidate = benchmark_json(scaled(BASELINE_SAMPLES, 0.5), context={**CPU, "threads_per_device": "2", key: value})
    code, report = gate_report(tmp_path, baseline, candidate)
    assert code == 2
    [reason] = report["unusable"]
    assert reason.startswith(f"context {key} differs: baseline ")
    assert f"candidate {str(value)!r}" in reason
    code, report = gate_report(tmp_path, baseline, candidate, "--allow-context-mismatch")
    assert code == 0 and any(key in warning for warning in report["warnings"])


def test_thread_keys_are_compared_where_both_runs_record_them(tmp_path):
    # threads_per_device is newer than the baseline: not compared; the other keys still are.
    baseline = benchmark_json(BASELINE_SAMPLES, context=CPU)
    candidate = benchmark_json(BASELINE_SAMPLES, context={**CPU, "threads_per_device": "1"})
    assert gate(tmp_path, baseline, candidate) == 0
    candidate["context"]["intra_op_threads"] = "1"
    assert gate(tmp_path, baseline, candidate) == 2


def test_gpu_runs_do_not_compare_the_host_threads(tmp_path):
    baseline = benchmark_json(BASELINE_SAMPLES, context={"intra_op_threads": "8", "cpu_model": "AMD EPYC"})
    candidate = benchmark_json(BASELINE_SAMPLES, context={"intra_op_threads": "4", "cpu_model": "Intel Xeon"})
    assert gate(tmp_path, baseline, candidate) == 0


def test_a_window_takes_only_runs_at_the_candidates_thread_count(tmp_path, capsys):
    folder = tmp_path / "history"
    folder.mkdir()
    (folder / "old.json").write_text(json.dumps(
        benchmark_json(BASELINE_SAMPLES, context={**CPU, "git_sha": "a" * 40, "threads_per_device": "2"})))
    candidate = write(tmp_path, "candidate.json",
                      benchmark_json(BASELINE_SAMPLES, context={**CPU, "threads_per_device": "1"}))
    assert perf_gate.main(["--window", str(folder), candidate]) == 2
    assert "threads_per_device='1'" in capsys.readouterr().out


# Stalled repetitions, as throttled ones.

def with_stalls(document, stalled_repetitions):
    document = copy.deepcopy(document)
    for name in (SINGLE, DDP):
        for entry in iterations(document, name)[:stalled_repetitions]:
            entry.update({"iteration_max_over_median": 4.2, "stalled": 1.0})
    return document


def test_the_gate_refuses_a_stalled_candidate_with_refuse_stalled(tmp_path, capsys):
    baseline = benchmark_json(BASELINE_SAMPLES)
    candidate = with_stalls(benchmark_json(BASELINE_SAMPLES), 3)
    code, report = gate_report(tmp_path, baseline, candidate, "--refuse-stalled")
    assert code == 2
    [reason] = report["unusable"]
    assert reason.startswith("the candidate has 6 stalled repetition(s) in 2 benchmark(s) (--refuse-stalled): ")
    assert f"{SINGLE} (3 of 10)" in reason
    assert gate(tmp_path, baseline, candidate) == 0  # without the option stalls do not decide
    assert gate(tmp_path, baseline, with_stalls(benchmark_json(BASELINE_SAMPLES), 0), "--refuse-stalled") == 0
    # The options are independent: --refuse-throttled does not refuse a stall.
    assert gate(tmp_path, baseline, candidate, "--refuse-throttled") == 0
