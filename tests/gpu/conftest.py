"""The GPU tests: parbench run as a user runs it, on GPUs, its JSON read through parbench_results.

Each test says how many GPUs it needs and skips where fewer are visible, so these run (and skip)
on any machine: ctest registers them with the label `gpu` (ctest -L gpu), and ci/gpu-check.sh's
`test` step runs them on a GPU machine. The binary: PARBENCH_BINARY (ctest and ci/gpu-check.sh
set it), else build/parbench."""
import os
import subprocess
from pathlib import Path

import pytest

from parbench_results import cases
from parbench_results.suite import visible_gpus

REPO = Path(__file__).resolve().parents[2]
BINARY = os.environ.get("PARBENCH_BINARY") or str(REPO / "build" / "parbench")
GPUS = visible_gpus()


def needs_gpus(count):
    """Skips a test where fewer than `count` GPUs are visible."""
    return pytest.mark.skipif(GPUS < count, reason=f"needs {count} GPU{'s' if count > 1 else ''}, {GPUS} visible")


@pytest.fixture
def parbench():
    if not Path(BINARY).is_file():
        pytest.skip(f"no parbench binary at {BINARY} (set PARBENCH_BINARY)")
    return BINARY


class Ran:
    """One parbench run: its exit status, stdout, stderr and results (None where no JSON came)."""

    def __init__(self, done, json_path):
        self.status, self.stdout, self.stderr = done.returncode, done.stdout, done.stderr
        self.json_path = json_path
        self.results = cases.load([str(json_path)]) if json_path.is_file() else None

    @property
    def context(self):
        return self.results.runs[0].context

    def case(self, *parts):
        """The one case whose name holds every part."""
        found = [case for case in self.results.cases if all(part in case.name for part in parts)]
        assert len(found) == 1, f"{len(found)} cases hold {parts}: {[case.name for case in self.results.cases]}"
        return found[0]

    def last_line(self):
        return self.stderr.strip().splitlines()[-1] if self.stderr.strip() else ""


@pytest.fixture
def run(parbench, tmp_path):
    """run(name, *args, timeout=S): parbench ARGS into tmp_path/NAME.json."""
    def run_parbench(name, *args, timeout=600, env=None):
        json_path = tmp_path / f"{name}.json"
        done = subprocess.run([parbench, *args, f"--benchmark_out={json_path}", "--benchmark_out_format=json"],
                              capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
        return Ran(done, json_path)
    return run_parbench
