"""Runs declared as data (benchmarks/suites/, parbench_results.suite): every suite file parses and
names only flags parbench takes; the reference suite's commands are the ones behind the README's
table; the runner's dry run, its refusals (too few GPUs, a bad file), and a real run on the CPU.

Needs the parbench binary for the flag check and the real run: PARBENCH_BINARY (its ctest entry
sets it), else build/parbench."""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from parbench_results import headline, suite

REPO = Path(__file__).resolve().parents[2]
BINARY = os.environ.get("PARBENCH_BINARY") or str(REPO / "build" / "parbench")
needs_binary = pytest.mark.skipif(not Path(BINARY).is_file(), reason=f"no parbench binary at {BINARY} (ctest sets PARBENCH_BINARY)")
SUITE_FILES = sorted((REPO / "benchmarks" / "suites").glob("*.toml"))
HELP = """  --strategies=LIST      strategies
  --split-sizes=LIST     pipeline micro-batch sizes
  --print-schedule=NAME  with --micro-batches=M (default 4)
"""


def write(tmp_path, text, name="mine.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


ONE_RUN = """description = "one run"
[[run]]
name = "one"
purpose = "a case"
minutes = 1
gpus = {gpus}
command = "{command}"
"""


def test_there_are_suites_and_each_parses():
    assert {path.stem for path in SUITE_FILES} >= {"reference-2gpu", "reference-4gpu", "memory-2gpu", "cpu"}
    for path in SUITE_FILES:
        read = suite.read(path)
        assert read.runs and all(run.purpose and run.minutes > 0 for run in read.runs), path


@needs_binary
def test_every_suite_command_names_only_flags_parbench_takes():
    text = suite.help_text(BINARY)
    for path in SUITE_FILES:
        suite.check_flags(suite.read(path), text)  # raises SuiteError naming the run and the flag


def test_an_unknown_flag_is_named():
    known = suite.known_flags(HELP)
    assert known == {"strategies", "split-sizes", "print-schedule", "micro-batches"}
    run = suite.Run("one", "p", 1, 0, ("--strategies=single", "--benchmark_min_time=0.1", "--split-size=4", "stray"))
    assert suite.unknown_flags(run, known) == ["--split-size", "stray"]
    read = suite.Suite(Path("x.toml"), "d", (run,))
    with pytest.raises(suite.SuiteError, match=r"run 'one': parbench takes no --split-size"):
        suite.check_flags(read, HELP)


def argv_of(json_path):
    """A committed run's parbench arguments, less the output file's."""
    argv = json.loads(Path(json_path).read_text())["context"]["argv"].split()
    return [arg for arg in argv if not arg.startswith(("--benchmark_out=", "--benchmark_out_format="))]


def test_the_reference_suite_reproduces_the_readmes_table():
    # The README's headline table names the JSON it is made from; the reference suite's runs of
    # those set-ups are those JSON files' command lines.
    (_, _, files), = headline.blocks((REPO / "README.md").read_text(), "README.md")
    runs = {run.name: run for run in suite.read(REPO / "benchmarks" / "suites" / "reference-2gpu.toml").runs}
    for name in files:
        run = runs[re.search(r"ref_(resnet_\d+_\w+)\.json$", name).group(1)]
        assert list(run.args) == argv_of(REPO / name), name


def run_main(monkeypatch, capsys, gpus, *args):
    monkeypatch.setattr(suite, "visible_gpus", lambda: gpus)
    status = suite.main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_too_few_gpus_are_refused_in_one_line_before_anything_runs(tmp_path, monkeypatch, capsys):
    path = write(tmp_path, ONE_RUN.format(gpus=2, command="parbench --strategies=ddp"))
    out = tmp_path / "out"
    status, stdout, stderr = run_main(monkeypatch, capsys, 1, path, "--out", out, "--parbench", "/nonexistent")
    assert status == 2
    assert stderr == f"suite: {path}: run 'one' needs 2 GPUs, 1 visible: nothing ran\n"
    assert not out.exists() and stdout == ""


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path, monkeypatch, capsys):
    path = write(tmp_path, ONE_RUN.format(gpus=4, command="parbench --strategies=single --batch=8"))
    status, stdout, stderr = run_main(monkeypatch, capsys, 0, path, "--dry-run", "--parbench", "/nonexistent",
                                      "--out", tmp_path / "out")
    assert status == 0 and stderr == ""
    assert "1 runs, about 1 min; needs 4 GPUs, 0 visible: too few, 4 more needed to run it" in stdout
    assert "one  (1 min, 4 GPUs): a case" in stdout and "parbench --strategies=single --batch=8" in stdout
    assert not (tmp_path / "out").exists()


def test_a_suite_is_found_by_its_name(monkeypatch, capsys):
    status, stdout, _ = run_main(monkeypatch, capsys, 0, "cpu", "--dry-run", "--parbench", "/nonexistent")
    assert status == 0 and stdout.startswith("suite cpu: ")


@pytest.mark.parametrize("text, message", [
    ("description = 'd'\n", "needs at least one [[run]]"),
    ("[[run]]\nname='a'\n", "needs a description"),
    ("description = 'd'\nextra = 1\n", "unknown key 'extra'"),
    (ONE_RUN.format(gpus=0, command="python x.py"), "command must start with 'parbench'"),
    (ONE_RUN.format(gpus=0, command="parbench --benchmark_out=x.json"), "--benchmark_out is the runner's"),
    (ONE_RUN.format(gpus="'two'", command="parbench"), "gpus must be a whole number"),
    (ONE_RUN.format(gpus=-1, command="parbench"), "gpus must be 0 or more"),
    (ONE_RUN.format(gpus=0, command="parbench") + ONE_RUN.split("\n", 1)[1].format(gpus=0, command="parbench"),
     "named twice"),
    ("description = \n", "not TOML"),
])
def test_a_bad_suite_file_is_refused_naming_what_is_wrong(tmp_path, monkeypatch, capsys, text, message):
    path = write(tmp_path, text)
    status, stdout, stderr = run_main(monkeypatch, capsys, 8, path, "--dry-run")
    assert status == 2 and stdout == ""
    assert stderr.startswith(f"suite: {path}") and message in stderr and stderr.count("\n") == 1


@needs_binary
def test_a_suite_runs_each_command_and_collects_its_json(tmp_path):
    path = write(tmp_path, """description = "two runs on the CPU"
[[run]]
name = "single"
purpose = "one case"
minutes = 1
gpus = 0
command = "parbench --preset=cpu --strategies=single --models=tinycnn --batch=4 --image=16 --repetitions=1 --iterations=2 --warmup=1"
[[run]]
name = "bad"
purpose = "a filter that selects nothing: exit 2, and the next run still runs"
minutes = 1
gpus = 0
command = "parbench --preset=cpu --strategies=single --models=tinycnn --benchmark_filter=nothing-matches"
[[run]]
name = "pipeline"
purpose = "two cases"
minutes = 1
gpus = 0
command = "parbench --preset=cpu --strategies=pipeline --models=tinycnn --batch=4 --image=16 --split-sizes=2 --schedules=gpipe,1f1b --repetitions=1 --iterations=2 --warmup=1"
""")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO / "plots"), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-m", "parbench_results.suite", str(path), "--parbench", BINARY,
                           "--out", str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1, done.stderr  # the bad run's exit 2
    index = json.loads((out / "suite.json").read_text())
    assert [(run["name"], run["exit"]) for run in index["runs"]] == [("single", 0), ("bad", 2), ("pipeline", 0)]
    names = {entry["run_name"] for entry in json.loads((out / "pipeline.json").read_text())["benchmarks"]}
    assert {name.split("/schedule:")[1].split("/")[0] for name in names} == {"gpipe", "1f1b"}
    assert json.loads((out / "single.json").read_text())["benchmarks"]
    assert "2 of 3 runs exited 0; not: bad" in done.stderr


def documented_commands(text):
    """The parbench command lines of a Markdown text's code blocks, continuation lines joined,
    comments left out."""
    commands, blocks = [], re.findall(r"```sh\n(.*?)```", text, re.DOTALL)
    for block in blocks:
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            if line.startswith("./build/parbench "):
                commands.append(shlex.split(line.split(" #")[0])[1:])
    return commands


@needs_binary
def test_every_documented_parbench_command_names_only_flags_parbench_takes():
    known = suite.known_flags(suite.help_text(BINARY))
    for page in ("README.md", "docs/RUNNING.md"):
        commands = documented_commands((REPO / page).read_text())
        assert len(commands) >= 5, page
        for args in commands:
            run = suite.Run("doc", "p", 1, 0, tuple(args))
            assert suite.unknown_flags(run, known) == [], f"{page}: {' '.join(args)}"
