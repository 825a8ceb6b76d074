"""Runs kept gzip-compressed (FILE.json.gz) are read as they are: by the regression gate, its
--window and the report (docs/PERF_GATE.md, "Files"). The gate's 64 MiB cap holds for the
decompressed content, read a chunk at a time, and a file that is not whole gzip is unusable:
exit 2, one line."""
import gzip
import json
import os
import subprocess
import sys
import zlib

import pytest

from parbench_results import perf_gate
from parbench_results.schema import ResultsError, read_document
from scripts import REPO
from test_perf_gate import BASELINE_SAMPLES, DDP, SINGLE, benchmark_json, scaled
from test_perf_gate_history import history_run, noisy

GATE = REPO / "ci" / "perf-gate"
MIB = 1024 * 1024


def write_json(path, document):
    path.write_text(json.dumps(document))
    return str(path)


def write_gzip(path, document):
    path.write_bytes(gzip.compress(json.dumps(document).encode("utf-8")))
    return str(path)


def decision(baseline, candidate, out, *options):
    """The gate's exit code and its --json-out report, less the files' names."""
    code = perf_gate.main([baseline, candidate, "--json-out", str(out), *options])
    report = json.loads(out.read_text())
    report.pop("baseline", None), report.pop("candidate", None)
    return code, report


def run_gate(*arguments, timeout=120):
    """ci/perf-gate as CI runs it, this checkout's package first."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plots"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(GATE), *arguments], capture_output=True, text=True, check=False,
                          env=env, timeout=timeout)


@pytest.mark.parametrize("factor, expected", [(1.0, 0), (1.3, 1)], ids=["same", "slower"])
def test_a_gzip_baseline_gives_the_decision_of_its_json(tmp_path, factor, expected):
    baseline, candidate = benchmark_json(BASELINE_SAMPLES), benchmark_json(scaled(BASELINE_SAMPLES, factor))
    plain = decision(write_json(tmp_path / "baseline.json", baseline),
                     write_json(tmp_path / "candidate.json", candidate), tmp_path / "plain.json")
    packed = decision(write_gzip(tmp_path / "baseline.json.gz", baseline),
                      write_json(tmp_path / "candidate2.json", candidate), tmp_path / "packed.json")
    assert plain[0] == expected
    assert packed == plain
    both = decision(write_gzip(tmp_path / "b.json.gz", baseline), write_gzip(tmp_path / "c.json.gz", candidate),
                    tmp_path / "both.json")
    assert both == plain


def test_a_window_folder_takes_gzip_runs_beside_json_ones(tmp_path):
    folder = tmp_path / "history"
    folder.mkdir()
    runs = [history_run("a1b2c3d4", 1, {SINGLE: noisy(250.0, seed=21)}),
            history_run("b2c3d4e5", 2, {SINGLE: noisy(250.0, seed=22)})]
    write_json(folder / "old.json", runs[0])
    write_gzip(folder / "newer.json.gz", runs[1])
    (folder / "notes.txt").write_text("not a run")
    candidate = write_json(tmp_path / "candidate.json", history_run("c3d4e5f6", 3, {SINGLE: noisy(250.0, seed=23)}))
    out = tmp_path / "report.json"
    assert perf_gate.main(["--window", str(folder), candidate, "--json-out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [run["git_sha"][:8] for run in report["window"]] == ["a1b2c3d4", "b2c3d4e5"]
    [row] = report["benchmarks"]
    assert row["baseline_repetitions"] == sum(1 for run in runs for entry in run["benchmarks"]
                                              if entry["run_type"] == "iteration")


def test_the_cap_holds_for_the_decompressed_content(tmp_path, capsys, monkeypatch):
    run = benchmark_json(BASELINE_SAMPLES)
    size = len(json.dumps(run).encode("utf-8"))
    baseline = write_gzip(tmp_path / "baseline.json.gz", run)
    candidate = write_json(tmp_path / "candidate.json", run)
    assert os.path.getsize(baseline) < size // 2
    monkeypatch.setattr(perf_gate, "MAX_INPUT_BYTES", size - 1)
    assert perf_gate.main([baseline, candidate]) == 2
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("unusable: ")]
    assert line == f"unusable: {baseline}: more than the {size - 1} bytes this reader takes, decompressed"
    monkeypatch.setattr(perf_gate, "MAX_INPUT_BYTES", size)
    assert perf_gate.main([baseline, write_json(tmp_path / "c.json", run)]) == 0


def test_a_gzip_bomb_is_refused_at_the_cap_without_eating_memory(tmp_path):
    # 1 GiB of spaces after a JSON object, in about 1 MiB of gzip: the real 64 MiB cap refuses it,
    # and the process that read it never held more than a fraction of the whole.
    bomb = tmp_path / "bomb.json.gz"
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(bomb, "wb") as file:
        file.write(compressor.compress(json.dumps(benchmark_json(BASELINE_SAMPLES)).encode("utf-8")))
        block = b" " * MIB
        for _ in range(1024):
            file.write(compressor.compress(block))
        file.write(compressor.flush())
    assert bomb.stat().st_size < 8 * MIB
    candidate = write_json(tmp_path / "candidate.json", benchmark_json(BASELINE_SAMPLES))
    # The peak of what Python allocated while the gate ran (not the process's RSS, which Linux
    # carries over from the forking test process).
    measure = ("import sys, tracemalloc\n"
               "from parbench_results import perf_gate\n"
               "tracemalloc.start()\n"
               "code = perf_gate.main(sys.argv[1:])\n"
               "print('peak_bytes', tracemalloc.get_traced_memory()[1], file=sys.stderr)\n"
               "sys.exit(code)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plots"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", measure, str(bomb), candidate], capture_output=True, text=True,
                            check=False, env=env, timeout=300)
    assert result.returncode == 2, result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("unusable: ")]
    assert line == f"unusable: {bomb}: more than the {perf_gate.MAX_INPUT_BYTES} bytes this reader takes, decompressed"
    peak_mib = int(result.stderr.split("peak_bytes")[1].split()[0]) / MIB
    assert peak_mib < 200, f"the refused bomb took {peak_mib:.0f} MiB"


def corrupt_files(tmp_path):
    data = gzip.compress(json.dumps(benchmark_json(BASELINE_SAMPLES)).encode("utf-8"))
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF  # inside the deflate stream: a bad stream or a bad checksum
    return {"not_gzip": json.dumps(benchmark_json(BASELINE_SAMPLES)).encode("utf-8"),
            "truncated": data[:len(data) // 2],
            "flipped": bytes(flipped),
            "bad_checksum": data[:-8] + bytes(8)}


@pytest.mark.parametrize("kind", ["not_gzip", "truncated", "flipped", "bad_checksum"])
def test_a_corrupt_gzip_is_unusable_in_one_line(tmp_path, kind):
    path = tmp_path / f"{kind}.json.gz"
    path.write_bytes(corrupt_files(tmp_path)[kind])
    candidate = write_json(tmp_path / "candidate.json", benchmark_json(BASELINE_SAMPLES))
    result = run_gate(str(path), candidate)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("unusable: ")]
    assert line.startswith(f"unusable: {path}: cannot decompress: ") or \
        line.startswith(f"unusable: {path}: not valid JSON"), line
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_a_corrupt_gzip_in_a_window_folder_is_unusable(tmp_path):
    folder = tmp_path / "history"
    folder.mkdir()
    write_json(folder / "old.json", history_run("a1b2c3d4", 1, BASELINE_SAMPLES))
    (folder / "broken.json.gz").write_bytes(corrupt_files(tmp_path)["truncated"])
    candidate = write_json(tmp_path / "candidate.json", history_run("c3d4e5f6", 3, BASELINE_SAMPLES))
    result = run_gate("--window", str(folder), candidate)
    assert result.returncode == 2
    [line] = [line for line in result.stdout.splitlines() if line.startswith("unusable: ")]
    assert line.startswith(f"unusable: {folder / 'broken.json.gz'}: cannot decompress: ")


def test_the_reader_gives_a_gzip_run_as_its_json(tmp_path):
    run = benchmark_json({SINGLE: noisy(100.0, seed=3), DDP: noisy(60.0, seed=4)})
    assert read_document(write_gzip(tmp_path / "run.json.gz", run)) == \
        read_document(write_json(tmp_path / "run.json", run))
    empty = tmp_path / "empty.json.gz"
    empty.write_bytes(gzip.compress(b""))
    with pytest.raises(ResultsError, match="empty file"):
        read_document(str(empty))
