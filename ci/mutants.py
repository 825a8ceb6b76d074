"""The mutation check: applies each one-line mutant of ci/mutants.txt in turn, rebuilds what the
mutant touches, runs the test named for it and expects that test to fail; restores the file after
each, whatever happens. Prints a table, one row per mutant:

  python3 ci/mutants.py [--build-dir=build] [--list FILE]

Exits 0 when every mutant was caught, 1 when one survived (its test passed under it) or could not
be applied (its line is not in its file exactly once), 2 for a list that cannot be read. Run by
ci/mutants.sh; the C++ mutants need a configured build folder (ninja rebuilds parbench and its
test binary after each change, then once more after the last restore).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KEYS = ("file", "from", "to", "test")


class ListError(Exception):
    """The mutants list cannot be read: says where and why."""


@dataclasses.dataclass
class Mutant:
    file: str
    original: str  # the line's text without its indentation
    replacement: str
    test: str  # "gtest FILTER" or "pytest FILE [-k EXPRESSION]"
    line: int  # where the entry starts in the list

    def describe(self) -> str:
        return f"{self.file}: {self.original}"


def parse(text: str, source: str = "ci/mutants.txt") -> list[Mutant]:
    """The entries of a mutants list: blocks of file/from/to/test lines, '#' lines ignored."""
    mutants, fields, start = [], {}, 0

    def close(number: int):
        if not fields:
            return
        missing = [key for key in KEYS if key not in fields]
        if missing:
            raise ListError(f"{source}:{start}: the entry has no {', '.join(missing)} line (each needs file, from, "
                            "to and test)")
        if fields["from"] == fields["to"]:
            raise ListError(f"{source}:{start}: `to` is the same as `from`: not a mutant")
        kind = fields["test"].split()[0]
        if kind not in ("gtest", "pytest") or len(fields["test"].split()) < 2:
            raise ListError(f"{source}:{start}: test must be `gtest FILTER` or `pytest FILE [-k EXPRESSION]`, "
                            f"not {fields['test']!r}")
        mutants.append(Mutant(fields["file"], fields["from"], fields["to"], fields["test"], start))
        fields.clear()

    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("#"):
            continue
        if not line.strip():
            close(number)
            continue
        key, colon, value = line.partition(":")
        if not colon or key not in KEYS:
            raise ListError(f"{source}:{number}: expected `file:`, `from:`, `to:` or `test:`, got {line!r}")
        if key in fields:
            raise ListError(f"{source}:{number}: a second `{key}:` line in one entry (entries are apart by a blank line)")
        if not fields:
            start = number
        fields[key] = value.strip()
    close(len(text.splitlines()) + 1)
    return mutants


def matching_lines(mutant: Mutant, repo: Path = REPO) -> list[int]:
    """The 0-based numbers of the file's lines whose text, without indentation, is the mutant's `from`."""
    path = repo / mutant.file
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    return [index for index, line in enumerate(lines) if line.strip() == mutant.original]


def problems(mutants: list[Mutant], repo: Path = REPO) -> list[str]:
    """Why entries cannot be applied: a missing file, or a `from` found other than once."""
    found = []
    for mutant in mutants:
        if not (repo / mutant.file).is_file():
            found.append(f"line {mutant.line}: {mutant.file} is not a file")
            continue
        count = len(matching_lines(mutant, repo))
        if count != 1:
            found.append(f"line {mutant.line}: {mutant.describe()!r} matches {count} lines of {mutant.file}, not 1")
    return found


def mutated_text(mutant: Mutant, text: str) -> str:
    lines = text.splitlines(keepends=True)
    index, = [i for i, line in enumerate(lines) if line.strip() == mutant.original]
    line = lines[index]
    indent = line[:len(line) - len(line.lstrip())]
    ending = line[len(line.rstrip("\r\n")):]
    lines[index] = indent + mutant.replacement + ending
    return "".join(lines)


def build(build_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["ninja", "-C", str(build_dir), "parbench", "parbench_tests"], capture_output=True, text=True)


def test_command(mutant: Mutant, build_dir: Path, python: str) -> list[str]:
    kind, _, rest = mutant.test.partition(" ")
    if kind == "gtest":
        return [str(build_dir / "tests" / "parbench_tests"), f"--gtest_filter={rest.strip()}"]
    return [python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *shlex.split(rest)]


def run(mutants: list[Mutant], build_dir: Path, python: str) -> int:
    rows, survived = [], 0
    env = dict(os.environ, PARBENCH_BINARY=str(build_dir / "parbench"), PYTHONPATH=str(REPO / "plots"),
               CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    rebuilt = False
    for mutant in mutants:
        path = REPO / mutant.file
        count = len(matching_lines(mutant))
        if count != 1:
            rows.append((mutant, f"NOT APPLIED: the line matches {count} lines", 0.0))
            survived += 1
            continue
        original = path.read_text()
        started = time.monotonic()
        try:
            path.write_text(mutated_text(mutant, original))
            outcome = None
            if not mutant.file.endswith(".py"):
                rebuilt = True
                made = build(build_dir)
                if made.returncode != 0:
                    outcome = "caught (does not build)"
            if outcome is None:
                result = subprocess.run(test_command(mutant, build_dir, python), cwd=REPO, env=env,
                                        capture_output=True, text=True)
                outcome = "caught" if result.returncode != 0 else "SURVIVED: its test passed"
        finally:
            path.write_text(original)  # a new mtime: ninja rebuilds it from the restored text
        if outcome.startswith("SURVIVED"):
            survived += 1
        rows.append((mutant, outcome, time.monotonic() - started))
    if rebuilt:
        build(build_dir)
    width = max(len(f"{mutant.file}:{mutant.line}") for mutant, _, _ in rows) if rows else 10
    print(f"{'mutant (list line)':<{width}}  {'seconds':>7}  outcome  (test)")
    for mutant, outcome, seconds in rows:
        print(f"{mutant.file + ':' + str(mutant.line):<{width}}  {seconds:7.1f}  {outcome}  ({mutant.test})")
    print(f"{len(rows) - survived} of {len(rows)} mutants caught")
    return 1 if survived else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default=os.environ.get("BUILD_DIR", "build"))
    parser.add_argument("--list", default=str(REPO / "ci" / "mutants.txt"))
    parser.add_argument("--python", default=sys.executable)
    arguments = parser.parse_args(argv)
    try:
        mutants = parse(Path(arguments.list).read_text(), arguments.list)
    except (OSError, ListError) as error:
        print(f"mutants: {error}", file=sys.stderr)
        return 2
    # A killed check still restores the file it mutated: SIGTERM and SIGHUP unwind as Ctrl-C does.
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, lambda received, _: sys.exit(128 + received))
    build_dir = Path(arguments.build_dir).resolve()
    if any(not mutant.file.endswith(".py") for mutant in mutants) and not (build_dir / "build.ninja").is_file():
        print(f"mutants: {build_dir} is not a configured build folder (no build.ninja); pass --build-dir", file=sys.stderr)
        return 2
    return run(mutants, build_dir, arguments.python)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
