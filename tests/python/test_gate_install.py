"""The gate as CI machines get it: `pip install ./` into a fresh virtual environment
with no torch gives a working `parbench-gate` command, and ci/perf-gate runs under a python that
has not installed the package. Offline: the checkout's pyproject.toml and plots/ are copied to a
temporary folder, built into a wheel there and installed from it, as `pip install ./` does."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from scripts import REPO as ROOT
from test_perf_gate import BASELINE_SAMPLES, benchmark_json  # the gate tests' own JSON maker


def write(path: Path, document: dict) -> Path:
    path.write_text(json.dumps(document))
    return path


@pytest.fixture(scope="module")
def gate_environment(tmp_path_factory) -> Path:
    """A fresh venv (no system site-packages, so no torch) with this checkout installed by pip."""
    work = tmp_path_factory.mktemp("gate-install")
    source = work / "source"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copytree(ROOT / "plots", source / "plots", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    # pip builds the wheel with this python's setuptools and wheel (ci/setup.sh installs both), the
    # step `pip install ./` takes first, then installs it into the fresh environment as that does.
    dist = work / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
                            "--no-build-isolation", "-w", str(dist), str(source)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    environment = work / "venv"
    venv.create(environment, with_pip=True, system_site_packages=False)
    python = environment / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                              *map(str, dist.glob("*.whl"))], capture_output=True, text=True)
    assert install.returncode == 0, install.stderr
    return environment


def test_pip_install_gives_a_parbench_gate_command_without_torch(gate_environment, tmp_path):
    python = gate_environment / "bin" / "python"
    assert subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode != 0
    gate = gate_environment / "bin" / "parbench-gate"
    assert gate.is_file()
    baseline = write(tmp_path / "baseline.json", benchmark_json(BASELINE_SAMPLES))
    same = subprocess.run([str(gate), str(baseline), str(baseline)], capture_output=True, text=True)
    assert same.returncode == 0, same.stdout + same.stderr
    slower = {name: [value * 2 for value in values] for name, values in BASELINE_SAMPLES.items()}
    candidate = write(tmp_path / "candidate.json", benchmark_json(slower))
    regressed = subprocess.run([str(gate), str(baseline), str(candidate)], capture_output=True, text=True)
    assert regressed.returncode == 1, regressed.stdout + regressed.stderr
    assert "REGRESSION" in regressed.stdout
    missing = subprocess.run([str(gate), str(baseline), str(tmp_path / "absent.json")], capture_output=True, text=True)
    assert missing.returncode == 2
    assert "absent.json" in missing.stdout + missing.stderr
    assert "Traceback" not in missing.stdout + missing.stderr


def test_ci_perf_gate_runs_with_a_python_that_lacks_the_package(tmp_path):
    """A bare venv has no parbench_results, as a CI machine's system python3: ci/perf-gate then
    reads the checkout's own copy."""
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False, system_site_packages=False)
    python = bare / "bin" / "python"
    assert subprocess.run([str(python), "-c", "import parbench_results"], capture_output=True).returncode != 0
    baseline = write(tmp_path / "baseline.json", benchmark_json(BASELINE_SAMPLES))
    run = subprocess.run([str(python), str(ROOT / "ci" / "perf-gate"), str(baseline), str(baseline)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
