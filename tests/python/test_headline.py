"""The headline table (parbench_results.headline): made from committed JSON, it is the README's
and docs/RESULTS.md's, and a table that differs from its JSON is caught."""
import json
import shutil

import pytest

from parbench_results import headline

REPO = headline.REPO
RUN = "reports/2026-11-26-2xh200"
FILES = [f"{RUN}/call1/ref_resnet_128_fp32.json", f"{RUN}/call3/ref_resnet_224_fp32.json"]


def test_the_readme_and_results_tables_are_the_scripts_output():
    assert headline.main(["--check", str(REPO / "README.md"), str(REPO / "docs" / "RESULTS.md")]) == 0
    readme = (REPO / "README.md").read_text()
    (start, end, files), = headline.blocks(readme, "README.md")
    assert files == FILES
    assert readme[start:end] == headline.table([str(REPO / name) for name in FILES])


def test_the_table_reads_each_strategys_best_case_against_single():
    text = headline.table([str(REPO / FILES[0])])
    lines = text.splitlines()
    assert lines[0] == ("| strategy | resnet50 128×128, batch 120, fp32: eager | resnet50 128×128, batch 120, "
                        "fp32: graphed |")
    assert "| single | 21.96 ms (5,464 img/s) | 20.44 ms (5,871 img/s) |" in lines
    assert "| best pipeline | 21.73 ms, 1.01x (interleaved-1f1b, split 60) | 15.28 ms, 1.34x (zb-h1, split 60) |" in lines
    assert "| ddp weak | 10,689 img/s, 1.96x | 11,478 img/s, 1.95x |" in lines


def test_a_stale_table_is_caught_and_updated(tmp_path, capsys):
    page = tmp_path / "page.md"
    fresh = headline.table([str(REPO / name) for name in FILES])
    page.write_text(f"# Page\n\n<!-- headline: {' '.join(FILES)} -->\n{fresh.replace('21.96', '20.96')}"
                    "<!-- headline: end -->\n\nAfter.\n")
    assert headline.main(["--check", str(page)]) == 1
    assert "page.md's table differs from its JSON" in capsys.readouterr().err
    assert headline.main(["--update", str(page)]) == 0
    assert headline.main(["--check", str(page)]) == 0
    assert page.read_text().endswith("<!-- headline: end -->\n\nAfter.\n") and "21.96 ms" in page.read_text()


def test_a_run_without_single_is_refused(tmp_path, capsys):
    document = json.loads((REPO / FILES[0]).read_text())
    document["benchmarks"] = [entry for entry in document["benchmarks"] if "/single/" not in entry["name"]]
    path = tmp_path / "no_single.json"
    path.write_text(json.dumps(document))
    assert headline.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"headline: {path}: no single case ran at") and err.count("\n") == 1


@pytest.mark.parametrize("text, message", [
    ("no block here\n", "no '<!-- headline: FILE... -->' block"),
    ("<!-- headline: a.json -->\n| x |\n", "has no '<!-- headline: end -->' after it"),
])
def test_a_page_without_a_whole_block_is_refused(tmp_path, capsys, text, message):
    page = tmp_path / "page.md"
    page.write_text(text)
    assert headline.main(["--check", str(page)]) == 2
    assert message in capsys.readouterr().err


def test_a_file_that_is_not_parbench_json_is_refused(tmp_path, capsys):
    path = tmp_path / "x.json"
    shutil.copy(REPO / "pyproject.toml", path)
    assert headline.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"headline: {path}") and err.count("\n") == 1
