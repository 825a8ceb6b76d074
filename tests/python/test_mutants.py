"""ci/mutants.txt, the mutation check's list (ci/mutants.sh): every entry names a file of the
repository and a line found there exactly once, so that the list cannot rot as the code changes;
and the list's reader refuses malformed entries and applies a mutant keeping the line's indentation."""
import pytest

from scripts import REPO, import_script

mutants = import_script("ci/mutants.py")


def test_every_mutant_line_matches_its_file_exactly_once():
    entries = mutants.parse((REPO / "ci" / "mutants.txt").read_text())
    assert len(entries) >= 5
    assert mutants.problems(entries) == []
    for entry in entries:
        assert (entry.test.split()[0] == "pytest") == entry.file.endswith(".py"), entry


def test_a_line_found_twice_or_not_at_all_is_a_problem(tmp_path):
    (tmp_path / "a.cpp").write_text("  int x = 1;\n  int x = 1;\n  int y = 2;\n")
    entries = mutants.parse("file: a.cpp\nfrom: int x = 1;\nto: int x = 2;\ntest: gtest A.B\n\n"
                            "file: a.cpp\nfrom: int z = 3;\nto: int z = 4;\ntest: gtest A.B\n\n"
                            "file: b.cpp\nfrom: int y = 2;\nto: int y = 3;\ntest: gtest A.B\n")
    found = mutants.problems(entries, tmp_path)
    assert len(found) == 3, found
    assert "matches 2 lines" in found[0] and "matches 0 lines" in found[1] and "b.cpp is not a file" in found[2]


def test_a_mutant_keeps_the_lines_indentation():
    entry, = mutants.parse("file: a.cpp\nfrom: return a * 2;\nto: return a;\ntest: gtest A.B\n")
    assert mutants.mutated_text(entry, "int f() {\n    return a * 2;\n}\n") == "int f() {\n    return a;\n}\n"


@pytest.mark.parametrize("text, why", [
    ("file: a.cpp\nfrom: x\nto: y\n", "has no test line"),
    ("file: a.cpp\nfrom: x\nto: x\ntest: gtest A.B\n", "not a mutant"),
    ("file: a.cpp\nfrom: x\nto: y\ntest: ctest A\n", "test must be"),
    ("file: a.cpp\nfile: b.cpp\n", "a second `file:` line"),
    ("path: a.cpp\n", "expected `file:`"),
])
def test_a_malformed_entry_is_refused_with_its_line(text, why):
    with pytest.raises(mutants.ListError, match=why):
        mutants.parse(text, "list")
