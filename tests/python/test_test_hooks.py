"""The test hooks (docs/DISTRIBUTED.md, "Test hooks") sit behind one seam: benchmarks/config/test_hooks.cpp
is the only C++ source that names one of their variables in code; every other file calls it."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SEAM = REPO / "benchmarks" / "config" / "test_hooks.cpp"
# A variable's name in a string literal: what reading it takes (comments may name it).
HOOK_LITERAL = re.compile(r'"PARBENCH_TEST_[A-Z_]*"')


def sources():
    for folder in ("benchmarks", "strategies", "models", "core"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in (".cpp", ".h", ".cu", ".cuh"):
                yield path


def test_only_the_seam_reads_a_test_hook():
    readers = [str(path.relative_to(REPO)) for path in sources() if HOOK_LITERAL.search(path.read_text())]
    assert readers == ["benchmarks/config/test_hooks.cpp"]


def test_every_documented_hook_is_read_by_the_seam():
    documented = set(re.findall(r"`(PARBENCH_TEST_[A-Z_]+)", (REPO / "docs" / "DISTRIBUTED.md").read_text()))
    read = {literal.strip('"') for literal in HOOK_LITERAL.findall(SEAM.read_text())}
    assert documented and documented == read
