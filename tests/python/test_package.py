"""What `pip install ./` installs: the wheel pip builds from pyproject.toml holds the
parbench_results package and its metadata, nothing else at the top of site-packages, and its
commands (parbench-gate, parbench-plot, parbench-timeline) name functions its modules define.
Offline: pyproject.toml and plots/ are copied to a temporary folder and built there, as pip
builds `./`, with this python's setuptools (skipped where it has none)."""
from __future__ import annotations

import ast
import configparser
import shutil
import subprocess
import sys
import zipfile

import pytest

from scripts import REPO

COMMANDS = {"parbench-gate": "parbench_results.perf_gate:main",
            "parbench-plot": "parbench_results.plot:main",
            "parbench-timeline": "parbench_results.pipeline_timeline:main"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    pytest.importorskip("setuptools.build_meta", reason="no build backend (setuptools) in this python")
    work = tmp_path_factory.mktemp("package")
    source = work / "source"
    source.mkdir()
    shutil.copy(REPO / "pyproject.toml", source)
    shutil.copytree(REPO / "plots", source / "plots", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    dist = work / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
                            "--no-build-isolation", "-w", str(dist), str(source)], capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    [built] = dist.glob("*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def test_the_wheel_installs_the_package_alone_at_top_level(wheel):
    top = {name.split("/")[0] for name in wheel.namelist()}
    info = {name for name in top if name.endswith(".dist-info")}
    assert len(info) == 1 and next(iter(info)).startswith("parbench_results-")
    assert top - info == {"parbench_results"}, sorted(top)
    modules = {name for name in wheel.namelist() if name.startswith("parbench_results/")}
    for module in ("plot", "timeline_plot", "pipeline_timeline", "styles", "perf_gate", "cases"):
        assert f"parbench_results/{module}.py" in modules, module


def test_the_wheels_commands_name_functions_of_its_modules(wheel):
    [info] = {name.split("/")[0] for name in wheel.namelist() if ".dist-info/" in name}
    entry_points = configparser.ConfigParser()
    entry_points.read_string(wheel.read(f"{info}/entry_points.txt").decode())
    assert dict(entry_points["console_scripts"]) == COMMANDS
    for target in COMMANDS.values():
        module, function = target.split(":")
        tree = ast.parse(wheel.read(module.replace(".", "/") + ".py"))
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert function in defined, target


@pytest.mark.parametrize("module", ["parbench_results.plot", "parbench_results.pipeline_timeline"])
def test_each_command_runs_as_a_module_and_answers_help(module):
    result = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    command = next(name for name, target in COMMANDS.items() if target.startswith(module + ":"))
    assert result.stdout.startswith(f"usage: {command} "), result.stdout
