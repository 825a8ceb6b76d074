"""ci/gate-power: what the gate detects, simulated from a run's per-case spread (docs/PERF_GATE.md,
"What the defaults detect")."""
import os
import subprocess
import sys

from scripts import REPO

GATE_POWER = REPO / "ci" / "gate-power"
GPU_RUN = REPO / "tests" / "python" / "fixtures" / "gpu_run.json"


def gate_power(*arguments):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plots"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(GATE_POWER), *arguments], capture_output=True, text=True,
                          check=False, env=env, timeout=300)


def table_rows(stdout):
    return {line.split(" | ")[0].strip("| "): line for line in stdout.splitlines() if line.startswith("| ")
            and line[2].isdigit()}


def test_gate_power_measures_the_committed_gpu_run():
    result = gate_power("--simulations", "4", "--repetitions", "5,7", "--power", "0.75")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("run: tests/python/fixtures/gpu_run.json: 12 cases with 2 or more repetitions")
    rows = table_rows(result.stdout)
    assert set(rows) == {"5", "7"}
    # At 5 a side no single case among 12 can be significant: every comparison is underpowered.
    assert "| none up to 100% (at 100%: exit 1 in 0, exit 2 in 4 of 4) |" in rows["5"]
    # A uniform slowdown is caught just past the 5% threshold (the run's spread is under 1%).
    uniform = rows["5"].split(" | ")[1]
    assert float(uniform.split("%")[0]) <= 7
    assert rows["5"].endswith("| 4 / 0 / 0 |")


def test_gate_power_refuses_bad_input(tmp_path):
    assert gate_power("--repetitions", "0").returncode == 2
    assert gate_power("--repetitions", "five").returncode == 2
    not_a_run = tmp_path / "run.json"
    not_a_run.write_text("{}")
    result = gate_power(str(not_a_run))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
