"""The product speaks of itself only (docs/CONTRIBUTING.md, "Words in the product"): outside
reports/, no file (and no file's name) tells how the work was organised (work sessions, numbered
runs on GPU machines, issue numbers, experiment names), and none holds an absolute path of a
development machine. A comment keeps the why; a report keeps the when. A path into reports/ may
name a report's folder or file as it is."""
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".h", ".cpp", ".cu", ".cuh", ".py", ".sh", ".md", ".txt", ".toml", ".cmake", ".yml", ".yaml",
                 ".json", ".cfg", ".in", ""}

WORDS = [
    ("a work session", re.compile(r"\bsessions?[ _-]?\d+", re.IGNORECASE)),
    ("a device-call name", re.compile(r"\bdevice calls?\b|\bcalls? (?:[A-Z]|\d+)(?:-[A-Z0-9])?\b|\bcall \d+'s\b")),
    ("an issue number", re.compile(r"\bissues? #?\d+|\bissue #\d+", re.IGNORECASE)),
    ("an experiment's name", re.compile(r"\b(?:again\d|mem\d|ref\d)_\w*")),
    ("an absolute machine path", re.compile(r"(?<![\w.])/(?:work|root|home)/")),
]
# A path into reports/ is the record's own name: it is left as it is.
REPORT_PATH = re.compile(r"\breports/[\w./*{},-]+")


def product_files():
    """Tracked files outside reports/ (every file under REPO where git cannot say)."""
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
        paths = [REPO / line for line in listed.splitlines()]
    except (OSError, subprocess.CalledProcessError):
        paths = [path for path in REPO.rglob("*") if path.is_file() and ".git" not in path.parts]
    return [path for path in paths if path.relative_to(REPO).parts[0] not in ("reports", "build", ".deps", ".venv")
            and path.suffix in TEXT_SUFFIXES and path.is_file()]


def findings(text):
    """(what, the words) for every lab word or machine path in a text, report paths left out."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        line = REPORT_PATH.sub("reports/...", line)
        for what, pattern in WORDS:
            found += [(number, what, match.group(0)) for match in pattern.finditer(line)]
    return found


def test_no_file_outside_reports_speaks_of_how_the_work_was_done():
    bad = []
    for path in product_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        bad += [f"{path.relative_to(REPO)}:{number}: {what}: {words!r}" for number, what, words in findings(text)]
    assert not bad, "words about how the work was done, or machine paths:\n" + "\n".join(bad)


def test_no_file_name_outside_reports_speaks_of_how_the_work_was_done():
    bad = [f"{path.relative_to(REPO)}: {what}: {words!r}" for path in product_files()
           for _, what, words in findings(str(path.relative_to(REPO)).replace("_", " "))]
    assert not bad, "file names about how the work was done:\n" + "\n".join(bad)


def test_each_kind_is_caught_and_report_paths_and_ordinary_words_are_not():
    session, call, issue = "ses" + "sion", "ca" + "ll", "iss" + "ue"
    caught = {
        f"measured in {session} 12": "a work session",
        f"the {session}9 run": "a work session",
        f"two device {call}s": "a device-call name",
        f"({call} A)": "a device-call name",
        f"{call}s F-H": "a device-call name",
        f"{call} 3": "a device-call name",
        f"fixed ({issue} 37)": "an issue number",
        f"{issue}s 37-39": "an issue number",
        "step " + "mem" + "2_gpt": "an experiment's name",
        "ref" + "4_resnet_128": "an experiment's name",
        "at /" + "work/main/build": "an absolute machine path",
        "under /" + "root/out": "an absolute machine path",
    }
    for text, what in caught.items():
        assert [found[1] for found in findings(text)] == [what], text
    left = [f"see reports/2026-11-27-{session}11/RUN.md and reports/x/{call}1/mem" + "2_gpt.json",
            f"each {call} of the function", f"the {issue} time of a kernel", "a CUDA graph replayed 3 times",
            "build/parbench", "$TMPDIR/parbench-ranks", f"the first {call}s it makes"]
    for text in left:
        assert findings(text) == [], text
