"""Runs declared as data: a suite file (TOML, benchmarks/suites/) names parbench runs.

    python -m parbench_results.suite FILE [--dry-run] [--parbench PATH] [--out DIR] [--timeout S]

A suite file has a `description` and one `[[run]]` table per run:

    [[run]]
    name = "resnet_128_fp32"     # the run's files: OUT/NAME.json, NAME.txt (stdout), NAME.stderr
    purpose = "..."              # what it answers
    minutes = 2                  # how long it took where it was measured (the file says where)
    gpus = 2                     # GPUs it needs (0: runs on the CPU)
    command = "parbench --strategies=... --image=128"

The runner reads and checks the whole file first: every key, every command's flags against
`parbench --help` (Google Benchmark's --benchmark_* pass as they are, but --benchmark_out and
--benchmark_out_format, which the runner sets), and the GPUs visible against the most any run
needs; a suite that asks for more GPUs than there are is refused with one line, before anything
runs. Then it runs each command in order, into OUT (default results/suite-<name>-<UTC time>),
and writes OUT/suite.json: each run's command, exit status, seconds and JSON file. A run that
fails (exit 1: a case failed, the JSON says which) does not stop the others; the runner exits 1
if any run did not exit 0. `{out}` in a command is OUT (e.g. --trace={out}/traces).

--dry-run checks the file the same way and prints what would run, its purpose, minutes and GPUs,
and whether this machine has them; it runs nothing and writes nothing.

Exit status: 0 every run exited 0; 1 a run did not; 2 the suite file, a flag or the GPU count
was refused (nothing ran).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "benchmarks" / "suites"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_RUN_KEYS = {"name": str, "purpose": str, "minutes": (int, float), "gpus": int, "command": str}
_OWN_FLAGS = ("--benchmark_out", "--benchmark_out_format")


class SuiteError(Exception):
    """A suite the runner refuses; its message is one line naming the file and what is wrong."""


try:
    import tomllib  # Python 3.11 on
except ImportError:  # an older python: the tomli package reads the same files, where installed
    try:
        import tomli as tomllib
    except ImportError:
        tomllib = None


@dataclass(frozen=True)
class Run:
    name: str
    purpose: str
    minutes: float
    gpus: int
    args: tuple[str, ...]  # the command's arguments after `parbench`

    def command(self) -> str:
        return "parbench " + " ".join(shlex.quote(arg) for arg in self.args)


@dataclass(frozen=True)
class Suite:
    path: Path
    description: str
    runs: tuple[Run, ...]

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def gpus(self) -> int:
        return max(run.gpus for run in self.runs)


def read(path: str | Path) -> Suite:
    """A suite file, checked: SuiteError names the file and what is wrong."""
    path = Path(path)
    if tomllib is None:
        raise SuiteError(f"{path}: reading TOML needs Python 3.11 or later, or the tomli package")
    try:
        document = tomllib.loads(path.read_text())
    except OSError as error:
        raise SuiteError(f"{path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise SuiteError(f"{path}: not TOML: {error}") from None
    unknown = set(document) - {"description", "run"}
    if unknown:
        raise SuiteError(f"{path}: unknown key {sorted(unknown)[0]!r} (allowed: description, run)")
    if not isinstance(document.get("description"), str) or not document["description"].strip():
        raise SuiteError(f"{path}: needs a description (a string)")
    tables = document.get("run")
    if not isinstance(tables, list) or not tables:
        raise SuiteError(f"{path}: needs at least one [[run]]")
    runs, names = [], set()
    for index, table in enumerate(tables):
        where = f"{path}: run {index + 1}"
        for key, kind in _RUN_KEYS.items():
            value = table.get(key)
            if value is None or isinstance(value, bool) or not isinstance(value, kind):
                allowed = "a number" if key == "minutes" else "a whole number" if kind is int else "a string"
                raise SuiteError(f"{where}: {key} must be {allowed}")
        where = f"{path}: run {table['name']!r}"
        extra = set(table) - set(_RUN_KEYS)
        if extra:
            raise SuiteError(f"{where}: unknown key {sorted(extra)[0]!r} (allowed: {', '.join(_RUN_KEYS)})")
        if not _NAME.match(table["name"]):
            raise SuiteError(f"{where}: a name is lower-case letters, digits, '_' and '-'")
        if table["name"] in names:
            raise SuiteError(f"{where}: named twice")
        names.add(table["name"])
        if not table["purpose"].strip():
            raise SuiteError(f"{where}: purpose is empty")
        if not table["minutes"] > 0:
            raise SuiteError(f"{where}: minutes must be above 0")
        if table["gpus"] < 0:
            raise SuiteError(f"{where}: gpus must be 0 or more")
        try:
            words = shlex.split(table["command"])
        except ValueError as error:
            raise SuiteError(f"{where}: command: {error}") from None
        if not words or words[0] != "parbench":
            raise SuiteError(f"{where}: command must start with 'parbench'")
        for arg in words[1:]:
            if arg.split("=")[0] in _OWN_FLAGS:
                raise SuiteError(f"{where}: {arg.split('=')[0]} is the runner's (OUT/{table['name']}.json)")
        runs.append(Run(table["name"], table["purpose"], table["minutes"], table["gpus"], tuple(words[1:])))
    return Suite(path, document["description"], tuple(runs))


def known_flags(help_text: str) -> set[str]:
    """Every --flag that parbench's --help names."""
    return set(re.findall(r"(?<![\w-])--([a-z][a-z-]*[a-z])", help_text))


def unknown_flags(run: Run, known: set[str]) -> list[str]:
    """The flags of a run's command that parbench does not take (Google Benchmark's pass)."""
    found = []
    for arg in run.args:
        if not arg.startswith("--"):
            found.append(arg)
            continue
        flag = arg[2:].split("=")[0]
        if not flag.startswith("benchmark_") and flag not in known:
            found.append(arg.split("=")[0])
    return found


def check_flags(suite: Suite, help_text: str) -> None:
    known = known_flags(help_text)
    for run in suite.runs:
        if bad := unknown_flags(run, known):
            raise SuiteError(f"{suite.path}: run {run.name!r}: parbench takes no {bad[0]} (see parbench --help)")


def visible_gpus() -> int:
    """GPUs this process may use: CUDA_VISIBLE_DEVICES's where it is set, else nvidia-smi's."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        listed = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                                text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    count = len(listed.stdout.split()) if listed.returncode == 0 else 0
    if visible is not None:
        named = [part for part in visible.split(",") if part.strip() and part.strip() != "-1"]
        count = min(count, len(named)) if visible.strip() else 0
    return count


def help_text(parbench: str) -> str:
    try:
        shown = subprocess.run([parbench, "--help"], capture_output=True, text=True, timeout=120)
    except OSError as error:
        raise SuiteError(f"{parbench}: {error.strerror} (build it: bash ci/build.sh, or give --parbench PATH)") from None
    if shown.returncode != 0 or "--strategies" not in shown.stdout + shown.stderr:
        raise SuiteError(f"{parbench} --help exited {shown.returncode} without its options")
    return shown.stdout + shown.stderr


def _minutes(value: float) -> str:
    return f"{value:g} min"


def _gpus(count: int) -> str:
    return f"{count} GPU{'' if count == 1 else 's'}"


def dry_run(suite: Suite, gpus: int) -> None:
    total = sum(run.minutes for run in suite.runs)
    enough = "" if gpus >= suite.gpus else f": too few, {suite.gpus - gpus} more needed to run it"
    print(f"suite {suite.name}: {suite.description}")
    print(f"  {len(suite.runs)} runs, about {_minutes(total)}; needs {_gpus(suite.gpus)}, {gpus} visible{enough}")
    for run in suite.runs:
        print(f"  {run.name}  ({_minutes(run.minutes)}, {_gpus(run.gpus)}): {run.purpose}")
        print(f"    {run.command()}")


def run_suite(suite: Suite, parbench: str, out: Path, timeout: float | None) -> int:
    out.mkdir(parents=True, exist_ok=True)
    done = []
    for index, run in enumerate(suite.runs):
        args = [arg.replace("{out}", str(out)) for arg in run.args]
        json_path = out / f"{run.name}.json"
        print(f"suite {suite.name}: [{index + 1}/{len(suite.runs)}] {run.name} (about {_minutes(run.minutes)}): "
              f"{run.command()}", file=sys.stderr, flush=True)
        began = time.monotonic()
        with open(out / f"{run.name}.txt", "w") as stdout, open(out / f"{run.name}.stderr", "w") as stderr:
            try:
                status = subprocess.run([parbench, *args, f"--benchmark_out={json_path}",
                                         "--benchmark_out_format=json"], stdout=stdout, stderr=stderr,
                                        timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                status = 124
        seconds = time.monotonic() - began
        last = (out / f"{run.name}.stderr").read_text().strip().splitlines()
        print(f"suite {suite.name}: {run.name}: exit {status} after {seconds:.0f} s: {last[-1] if last else ''}",
              file=sys.stderr, flush=True)
        done.append({"name": run.name, "purpose": run.purpose, "command": run.command(), "exit": status,
                     "seconds": round(seconds, 1), "json": json_path.name if json_path.is_file() else None})
    (out / "suite.json").write_text(json.dumps({"suite": suite.name, "file": str(suite.path),
                                                "description": suite.description, "runs": done}, indent=2) + "\n")
    failed = [entry["name"] for entry in done if entry["exit"] != 0]
    print(f"suite {suite.name}: {len(done) - len(failed)} of {len(done)} runs exited 0"
          + (f"; not: {', '.join(failed)}" if failed else "") + f"; results in {out}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parbench_results.suite",
                                     description="Runs a suite of parbench runs declared in a TOML file.")
    parser.add_argument("file", help="a suite file, e.g. benchmarks/suites/reference-2gpu.toml, or a suite's name")
    parser.add_argument("--dry-run", action="store_true", help="check the file and print what would run")
    parser.add_argument("--parbench", default=os.environ.get("PARBENCH_BINARY", str(REPO / "build" / "parbench")),
                        help="the parbench binary (default $PARBENCH_BINARY, else build/parbench)")
    parser.add_argument("--out", help="results folder (default results/suite-NAME-<UTC time>)")
    parser.add_argument("--timeout", type=float, help="seconds after which a run is stopped")
    args = parser.parse_args(argv)
    path = Path(args.file)
    if not path.is_file() and (SUITES / f"{args.file}.toml").is_file():
        path = SUITES / f"{args.file}.toml"
    try:
        suite = read(path)
        gpus = visible_gpus()
        if args.dry_run:
            if Path(args.parbench).is_file():
                check_flags(suite, help_text(args.parbench))
            dry_run(suite, gpus)
            return 0
        if gpus < suite.gpus:
            needs = next(run for run in suite.runs if run.gpus == suite.gpus)
            raise SuiteError(f"{path}: run {needs.name!r} needs {_gpus(suite.gpus)}, {gpus} visible: nothing ran")
        check_flags(suite, help_text(args.parbench))
    except SuiteError as error:
        print(f"suite: {error}", file=sys.stderr)
        return 2
    out = Path(args.out or f"results/suite-{suite.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    return run_suite(suite, args.parbench, out, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
