"""The source tree's layers (docs/EXTENDING.md, "Layers"): includes run one way.

core/ is below models/, which is below strategies/, which is below benchmarks/; inside
benchmarks/, one folder per role, in the order LAYERS gives. A file may include from its own
folder or a lower one, never from one above it, so that no cycle can form between folders."""
import re
from pathlib import Path

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
