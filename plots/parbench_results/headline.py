"""The headline table: each strategy's best case against single, per set-up, eager and graphed.

    python -m parbench_results.headline RUN.json...            the table, as Markdown, on stdout
    python -m parbench_results.headline --check FILE...        exit 1 where a file's table differs
    python -m parbench_results.headline --update FILE...       rewrite each file's table

Each RUN.json is one parbench run of one set-up (model, batch, image or seq, precision), with
eager and graphed cases (--cuda-graph=off,on); its columns are that set-up's eager and graphed
cases, in the order the files are given. Rows: single (its step time and throughput), then per
strategy its case of highest throughput (the pipeline's best schedule and split; ddp weak and
strong apart) with its step time and its throughput over single's from the same run. Weak-scaling
cases train a batch per rank, so their row gives throughput, not step time.

A Markdown file carries the table between two comments, the first naming the files it is made
from:

    <!-- headline: reports/RUN/a.json reports/RUN/b.json -->
    | strategy | ... |
    <!-- headline: end -->

--check and --update read those names (relative to the repository root: the folder holding
plots/), so the table in the README and the JSON it comes from cannot drift apart.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from parbench_results.cases import Case, Results, ResultsError, load, single_reference

REPO = Path(__file__).resolve().parents[2]
BEGIN = re.compile(r"^<!-- headline: (?!end)(.+?) -->$", re.MULTILINE)
END = "<!-- headline: end -->"


def _row_key(case: Case) -> str:
    if case.pipelined:
        return "best pipeline"
    if case.over_ranks:
        return f"{case.strategy} {case.fields['scaling']}"
    return case.strategy


def _throughput(case: Case) -> float:
    return case.stats("items_per_second").median * (int(case.fields["seq"]) if "seq" in case.fields else 1)


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _cell(case: Case, single: Case, unit: str) -> str:
    ratio = _throughput(case) / _throughput(single)
    if case.fields.get("scaling") == "weak":
        text = f"{_number(_throughput(case))} {unit}, {ratio:.2f}x"
    else:
        text = f"{case.stats('step_ms').median:.2f} ms, {ratio:.2f}x"
    if case.pipelined:
        text += f" ({case.fields['schedule']}, split {case.fields['split']})"
    return text


def _column_title(case: Case, graph: str) -> str:
    setup = case.setup
    size = f"seq {setup.seq}" if setup.seq else f"{setup.image}×{setup.image}"
    mode = "graphed" if graph == "on" else "eager"
    return f"{setup.model} {size}, batch {setup.batch}, {setup.precision}: {mode}"


def columns(results_per_file: list[Results]) -> list[tuple[str, dict[str, str]]]:
    """(title, {row: cell}) per set-up and graph mode, in file order, eager first."""
    found = []
    for results in results_per_file:
        path = results.runs[0].path
        setups = results.by_setup()
        if not setups:
            raise ResultsError(f"{path}: no training case")
        if len({(s.model, s.batch, s.image, s.seq, s.precision) for s in setups}) != 1:
            raise ResultsError(f"{path}: more than one set-up (give one model, batch, image or seq and "
                               "precision per file)")
        for setup, cases in setups.items():
            single = single_reference(cases)
            if single is None:
                raise ResultsError(f"{path}: no single case ran at {setup.describe()}, graph {setup.graph}")
            unit = "tok/s" if setup.seq else "img/s"
            best: dict[str, Case] = {}
            for case in cases:
                if case.ran and case.strategy != "single":
                    key = _row_key(case)
                    if key not in best or _throughput(case) > _throughput(best[key]):
                        best[key] = case
            cells = {"single": f"{single.stats('step_ms').median:.2f} ms ({_number(_throughput(single))} {unit})"}
            cells.update({key: _cell(case, single, unit) for key, case in best.items()})
            found.append((_column_title(single, setup.graph), cells))
    return found


def table(paths: list[str]) -> str:
    """The Markdown table of the given runs (ResultsError on a file that cannot serve)."""
    cols = columns([load([path]) for path in paths])
    rows: list[str] = []
    for _, cells in cols:
        rows.extend(key for key in cells if key not in rows)
    lines = ["| strategy | " + " | ".join(title for title, _ in cols) + " |",
             "| --- |" + " --- |" * len(cols)]
    lines += ["| " + row + " | " + " | ".join(cells.get(row, "-") for _, cells in cols) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def blocks(text: str, where: str) -> list[tuple[int, int, list[str]]]:
    """Each table block of a Markdown text: (start of its body, end of its body, its files)."""
    found = []
    for match in BEGIN.finditer(text):
        end = text.find(END, match.end())
        if end < 0:
            raise ResultsError(f"{where}: '{match.group(0)}' has no '{END}' after it")
        found.append((match.end() + 1, end, match.group(1).split()))
    return found


def refreshed(path: Path) -> tuple[str, str]:
    """A Markdown file's text as it is and with every table made again from its files."""
    text = path.read_text()
    found = blocks(text, str(path))
    if not found:
        raise ResultsError(f"{path}: no '<!-- headline: FILE... -->' block")
    new, last = [], 0
    for start, end, files in found:
        new += [text[last:start], table([str(REPO / name) for name in files])]
        last = end
    new.append(text[last:])
    return text, "".join(new)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m parbench_results.headline",
                                     description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 where a Markdown file's table differs")
    mode.add_argument("--update", action="store_true", help="rewrite each Markdown file's table")
    parser.add_argument("files", nargs="+", help="parbench JSON runs (or Markdown files with --check/--update)")
    args = parser.parse_args(argv)
    try:
        if not (args.check or args.update):
            sys.stdout.write(table(args.files))
            return 0
        stale = []
        updated = {}
        for name in args.files:
            old, new = refreshed(Path(name))
            if old != new:
                stale.append(name)
                updated[name] = new
        if args.update:
            for name, new in updated.items():
                Path(name).write_text(new)
            return 0
        for name in stale:
            print(f"headline: {name}'s table differs from its JSON (python -m parbench_results.headline "
                  f"--update {name})", file=sys.stderr)
        return 1 if stale else 0
    except (ResultsError, OSError) as error:
        print(f"headline: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
