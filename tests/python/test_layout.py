"""The source tree's layers (docs/EXTENDING.md, "Layers"): includes run one way. And the tree's
fitness: the tracked files stay under 30 MB, and reports/'s folders are named by date and subject.

core/ is below models/, which is below strategies/, which is below benchmarks/; inside
benchmarks/, one folder per role, in the order LAYERS gives. A file may include from its own
folder or a lower one, never from one above it, so that no cycle can form between folders."""
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# benchmarks/'s folders, lowest first: the one place the order is declared.
LAYERS = [
    "config",   # what the run is told: the command line (options) and the tests' hooks
    "measure",  # readings of the devices and of a step: memory, busy time, NVML, MFU, graphs, noise
    "cases",    # the case matrix as data: fields, names, build_cases, case_from_fields
    "launch",   # starting ranks as processes of this binary, and what they hand back
    "output",   # what a run writes: counters and labels, the JSON context and file, outcomes, verdict
    "advise",   # choosing cases before they run: --advise's predictions, --fit=batch's search
    "run",      # running cases: registration, the local and distributed runners, ranks, companion
    "app",      # the binaries' main()s
]
# The folders above benchmarks/, lowest first.
TOP_LEVEL = ["core", "models", "strategies", "benchmarks"]
# Apart from the C++ layers: Python (the PyTorch baselines) and data (the suites of runs).
NOT_LAYERED = {"pytorch", "suites"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
SOURCE_SUFFIXES = {".h", ".cpp", ".cu", ".cuh"}


def sources(folder):
    return sorted(path for path in (REPO / folder).rglob("*") if path.suffix in SOURCE_SUFFIXES)


def includes(path):
    return INCLUDE.findall(path.read_text())


def upward_includes(path, layer_of_file, layers):
    """The includes of `path` that name a folder above its own in `layers`."""
    own = layers.index(layer_of_file)
    found = []
    for included in includes(path):
        parts = included.split("/")
        if parts[0] != "benchmarks" or len(parts) < 3:
            continue
        if parts[1] in layers and layers.index(parts[1]) > own:
            found.append(included)
    return found


def listing(found):
    """One line per file: its path, then what it includes that it may not."""
    return "\n".join(f"  {path}: {', '.join(included)}" for path, included in sorted(found.items()))


def test_every_benchmarks_source_is_in_a_layer_folder():
    misplaced = [str(path.relative_to(REPO)) for path in sources("benchmarks")
                 if path.relative_to(REPO / "benchmarks").parts[0] not in LAYERS]
    assert misplaced == [], f"not in one of benchmarks/{{{','.join(LAYERS)}}}/"
    folders = {path.name for path in (REPO / "benchmarks").iterdir() if path.is_dir()}
    assert folders - NOT_LAYERED == set(LAYERS), "a benchmarks/ folder is missing from LAYERS, or LAYERS names one that is not there"


def test_no_benchmarks_folder_includes_one_above_it():
    upward = {}
    for path in sources("benchmarks"):
        layer = path.relative_to(REPO / "benchmarks").parts[0]
        if found := upward_includes(path, layer, LAYERS):
            upward[str(path.relative_to(REPO))] = found
    assert not upward, f"includes from a higher folder (lowest first: {' < '.join(LAYERS)}):\n{listing(upward)}"


def test_every_benchmarks_include_names_a_layer_and_a_file():
    wrong = {}
    for folder in TOP_LEVEL + ["tests"]:
        for path in sources(folder):
            bad = [included for included in includes(path) if included.startswith("benchmarks/") and
                   (included.split("/")[1] not in LAYERS or not (REPO / included).is_file())]
            if bad:
                wrong[str(path.relative_to(REPO))] = bad
    assert not wrong, f"includes of no benchmarks/ layer or no file:\n{listing(wrong)}"


def test_no_top_level_folder_includes_one_above_it():
    upward = {}
    for position, folder in enumerate(TOP_LEVEL):
        above = TOP_LEVEL[position + 1:]
        for path in sources(folder):
            found = [included for included in includes(path) if included.split("/")[0] in above]
            if found:
                upward[str(path.relative_to(REPO))] = found
    assert not upward, f"includes from a higher folder (lowest first: {' < '.join(TOP_LEVEL)}):\n{listing(upward)}"


def test_an_upward_include_is_caught(tmp_path):
    # The check itself, on a file of its own: config/ including run/ is upward, run/ including
    # config/ is not.
    low = tmp_path / "low.h"
    low.write_text('#include "benchmarks/run/case_runner.h"\n#include "benchmarks/config/options.h"\n')
    assert upward_includes(low, "config", LAYERS) == ["benchmarks/run/case_runner.h"]
    assert upward_includes(low, "run", LAYERS) == []


# The tree's size and reports/'s folders (reports/README.md): the whole checkout is carried to a
# GPU machine as it is, in one transfer of at most 64 MiB.

MAX_TREE_BYTES = 30 * 1000 * 1000
# Build outputs and tools' folders, never tracked: left out where git cannot say what is.
NOT_SOURCE = {".git", "build", ".venv", ".deps", ".gpu", ".prebuilt", "__pycache__", ".pytest_cache"}
# YYYY-MM-DD-<gpus>[-<subject>]: the GPUs as 2xh200, h100 (one), cpu; the subject in lower case.
REPORT_FOLDER = re.compile(r"\d{4}-\d{2}-\d{2}-(?:\d+x)?(?:[a-z]+\d+[a-z0-9]*|cpu)(?:-[a-z0-9][a-z0-9.]*)*")
# Words that tell how the work was organised, not what was measured (docs/CONTRIBUTING.md).
WORK_WORDS = re.compile(r"session|call|issue", re.IGNORECASE)


def tracked_files():
    """The files git tracks, or where git cannot say (an exported tree) every file outside NOT_SOURCE."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
        return [REPO / name for name in listed.decode("utf-8").split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        return [path for path in REPO.rglob("*")
                if path.is_file() and not NOT_SOURCE & set(path.relative_to(REPO).parts)]


def tree_bytes(files):
    """Bytes on disk of the files that exist (one deleted in the working tree counts nothing)."""
    return sum(path.stat().st_size for path in files if path.is_file())


def largest(files, count=10):
    sizes = {}
    for path in files:
        if path.is_file():
            top = "/".join(path.relative_to(REPO).parts[:2])
            sizes[top] = sizes.get(top, 0) + path.stat().st_size
    return "\n".join(f"  {size / 1e6:7.2f} MB  {name}" for name, size in
                     sorted(sizes.items(), key=lambda item: -item[1])[:count])


def test_the_tracked_tree_stays_under_30_mb():
    files = tracked_files()
    assert files, "no files found"
    total = tree_bytes(files)
    assert total <= MAX_TREE_BYTES, (
        f"the tracked files take {total / 1e6:.1f} MB, more than {MAX_TREE_BYTES / 1e6:.0f} MB: drop superseded "
        f"report folders (git history keeps them), leave out what make_report.py draws again, or commit raw runs "
        f"as FILE.json.gz (reports/README.md). Largest:\n{largest(files)}")


def bad_report_folders(names):
    """Each name that is not YYYY-MM-DD-<gpus>-<subject>, or that says how the work was organised."""
    return sorted(name for name in names
                  if not REPORT_FOLDER.fullmatch(name) or WORK_WORDS.search(name))


def test_report_folders_are_named_by_date_and_subject():
    folders = {path.relative_to(REPO / "reports").parts[0] for path in tracked_files()
               if path.is_file() and path.relative_to(REPO).parts[0] == "reports"
               and len(path.relative_to(REPO / "reports").parts) > 1}
    assert folders, "no report folder found"
    bad = bad_report_folders(folders)
    assert not bad, f"reports/ folders not named YYYY-MM-DD-<gpus>-<subject> (reports/README.md): {bad}"


def test_every_report_folder_is_in_the_index():
    index = (REPO / "reports" / "README.md").read_text()
    folders = {path.relative_to(REPO / "reports").parts[0] for path in tracked_files()
               if path.is_file() and path.relative_to(REPO).parts[0] == "reports"
               and len(path.relative_to(REPO / "reports").parts) > 1}
    missing = sorted(name for name in folders if f"`{name}/`" not in index)
    assert not missing, f"reports/README.md has no line for {missing}"
    listed = set(re.findall(r"^\| `([^`/]+)/` \|", index, re.MULTILINE))
    assert listed == folders, f"reports/README.md lists folders that are not there: {sorted(listed - folders)}"


def test_the_folder_name_check_catches_other_orders_and_work_words():
    good = ["2026-11-26-2xh200-memory", "2026-12-07-h100-large-then-ranks", "2026-11-27-2xh200-gpt-6.7b-zero"]
    assert bad_report_folders(good) == []
    session, call, issue = "ses" + "sion", "ca" + "ll", "iss" + "ue"
    bad = ["h100-2026-11-25-gpt", "2xh200-2026-11-22", f"2026-11-26-{session}9", f"2026-11-27-2xh200-{call}s",
           f"2026-11-27-2xh200-{issue}-37", "2026-11-26", "2026-11-26-", "26-11-2026-2xh200-memory",
           "2026-11-26-2xH200-Memory", "2026-11-26-advise-final", "2026-11-26-2xh200--memory"]
    assert bad_report_folders(bad) == sorted(bad)


def test_the_size_check_fails_a_tree_one_byte_over(monkeypatch):
    total = tree_bytes(tracked_files())
    monkeypatch.setitem(globals(), "MAX_TREE_BYTES", total - 1)
    with pytest.raises(AssertionError, match="more than"):
        test_the_tracked_tree_stays_under_30_mb()


def test_the_size_check_counts_every_byte(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 1000)
    (tmp_path / "b").write_bytes(b"y" * 234)
    assert tree_bytes([tmp_path / "a", tmp_path / "b", tmp_path / "gone"]) == 1234
