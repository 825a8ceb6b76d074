"""The CI scripts' scratch folders: ci/cpu-smoke.sh and ci/gpu-check.sh leave nothing in the
temporary folder, and gpu-check's unpacked dependencies are its own folder, last on the
library path. Both scripts are run here, with a stand-in parbench and a stand-in step."""
import json
import os
import subprocess
import sys

import pytest

from scripts import REPO

CPU_SMOKE = REPO / "ci" / "cpu-smoke.sh"
GPU_CHECK = REPO / "ci" / "gpu-check.sh"
CPU_BASELINE = REPO / "ci" / "baselines" / "cpu-smoke.json"


def stand_in_build(tmp_path, fails=False):
    """A build folder whose parbench writes the committed baseline to --benchmark_out (or fails),
    and whose CMakeCache names this python, as a configured build's does."""
    build = tmp_path / "build"
    build.mkdir()
    parbench = build / "parbench"
    parbench.write_text(
        "#!/usr/bin/env bash\n"
        + ("exit 3\n" if fails else "")
        + "for argument; do case $argument in --benchmark_out=*) cp " + f"'{CPU_BASELINE}'" + " \"${argument#*=}\";; esac; done\n")
    parbench.chmod(0o755)
    (build / "CMakeCache.txt").write_text(f"Python3_EXECUTABLE:FILEPATH={sys.executable}\n")
    return build


def scratch_env(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch),
           "PYTHONPATH": os.pathsep.join([str(REPO / "plots"), os.environ.get("PYTHONPATH", "")])}
    return scratch, env


@pytest.mark.parametrize("fails", [False, True], ids=["passes", "parbench-fails"])
def test_cpu_smoke_removes_its_temporary_folder(tmp_path, fails):
    scratch, env = scratch_env(tmp_path)
    build = stand_in_build(tmp_path, fails=fails)
    result = subprocess.run(["bash", str(CPU_SMOKE), str(build)], capture_output=True, text=True, env=env,
                            check=False, timeout=120)
    if fails:
        assert result.returncode == 3
    else:
        # The committed baseline against itself: the gate passes.
        assert result.returncode == 0, result.stdout + result.stderr
        assert "perf-gate: PASS (exit 0)" in result.stdout
    assert list(scratch.iterdir()) == []


def run_gpu_check(tmp_path, library_path):
    """gpu-check.sh with one step, `suite:probe`, whose python3 is a stand-in first on PATH that
    prints what the step sees (the library path, the results folder it is handed) and checks that
    the dependency folder exists while the step runs; no GPU needed."""
    scratch, env = scratch_env(tmp_path)
    stand_ins = tmp_path / "bin"
    stand_ins.mkdir()
    python = stand_ins / "python3"
    python.write_text(
        "#!/usr/bin/env bash\n"
        'echo "library_path=$LD_LIBRARY_PATH"\n'
        'deps=${LD_LIBRARY_PATH##*:}; deps=${deps%/usr/lib/x86_64-linux-gnu}; echo "deps=$deps"\n'
        'previous=""; for argument; do [[ $previous == --out ]] && echo "results=${argument%/*}"; previous=$argument; done\n'
        'ls -d "$deps" >/dev/null\n')
    python.chmod(0o755)
    env["PATH"] = f"{stand_ins}{os.pathsep}{env['PATH']}"
    env["OUT"] = str(tmp_path / "out")
    if library_path is None:
        env.pop("LD_LIBRARY_PATH", None)
    else:
        env["LD_LIBRARY_PATH"] = library_path
    result = subprocess.run(["bash", str(GPU_CHECK), "suite:probe"], capture_output=True, text=True, env=env,
                            check=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    seen = dict(line.split("=", 1) for line in result.stdout.splitlines()
                if line.startswith(("library_path=", "deps=", "results=")))
    assert os.path.dirname(seen["results"]) == str(scratch)
    return scratch, seen


def test_gpu_check_unpacks_its_dependencies_into_a_folder_of_its_own_last_on_the_library_path(tmp_path):
    scratch, seen = run_gpu_check(tmp_path, "/opt/vendor/lib:/usr/local/cuda/lib64")
    deps = seen["deps"]
    assert os.path.dirname(deps) == str(scratch) and os.path.basename(deps).startswith("parbench-deps.")
    assert seen["library_path"] == f"/opt/vendor/lib:/usr/local/cuda/lib64:{deps}/usr/lib/x86_64-linux-gnu"
    # Removed at exit, with the results folder (its contents are in results.tgz).
    assert list(scratch.iterdir()) == []
    assert (tmp_path / "out" / "results.tgz").is_file()


def test_gpu_check_takes_a_new_dependency_folder_each_run(tmp_path):
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    _, first = run_gpu_check(tmp_path / "first", None)
    _, second = run_gpu_check(tmp_path / "second", None)
    assert first["deps"] != second["deps"]
    # Without a library path before it, the folder is the whole of it.
    assert second["library_path"] == f"{second['deps']}/usr/lib/x86_64-linux-gnu"
