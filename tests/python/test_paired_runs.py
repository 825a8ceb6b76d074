"""ci/paired-runs (plots/parbench_results/paired_runs.py) and the old entry points that call it,
run against a stand-in parbench that writes what the real one would: each pairing's processes,
files and ratios, its bounds, a failing run and bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "ci" / "paired-runs"

# A stand-in parbench: one case per strategy x batch x graph mode x schedule its flags ask for,
# 3 repetitions, step_ms from FAKE_STEP_MS (default 10) times FAKE_FACTOR_<STRATEGY> and, with
# --trace, FAKE_TRACE_FACTOR; the binary's own FAKE_SCALE file beside it scales everything (so
# that two binaries differ). FAKE_FAIL makes it exit 3.
FAKE = textwrap.dedent('''\
    #!/usr/bin/env python3
    import json, os, sys
    from pathlib import Path
    if os.environ.get("FAKE_FAIL"):
        sys.exit(3)
    flags = dict(arg[2:].split("=", 1) for arg in sys.argv[1:] if arg.startswith("--") and "=" in arg)
    scale_file = Path(sys.argv[0]).with_name("FAKE_SCALE")
    scale = float(scale_file.read_text()) if scale_file.exists() else 1.0
    step = float(os.environ.get("FAKE_STEP_MS", "10")) * scale
    if "trace" in flags:
        step *= float(os.environ.get("FAKE_TRACE_FACTOR", "1"))
    benchmarks = []
    for strategy in flags.get("strategies", "single").split(","):
        for batch in flags.get("batch", "120").split(","):
            for graph in flags.get("cuda-graph", "off").split(","):
                for schedule in (flags["schedules"].split(",") if strategy == "pipeline" else [None]):
                    fields = {"strategy": strategy, "model": "resnet50", "batch": int(batch), "image": 128,
                              "precision": "fp32", "data": "device"}
                    name = f"train/{strategy}/resnet50/batch:{batch}/image:128/precision:fp32/data:device"
                    if schedule:
                        fields.update(gpus=2, split=20, schedule=schedule)
                        name += f"/gpus:2/split:20/schedule:{schedule}"
                    fields["graph"] = graph
                    if graph == "on":
                        name += "/graph:on"
                    value = step * float(os.environ.get("FAKE_FACTOR_" + strategy.upper(), "1"))
                    value *= 0.5 if graph == "on" else 1.0
                    for repetition, wobble in enumerate((0.99, 1.0, 1.01)):
                        benchmarks.append({"name": name + "/manual_time", "run_name": name + "/manual_time",
                                           "run_type": "iteration", "repetition_index": repetition,
                                           "fields": fields, "real_time": value * wobble, "time_unit": "ms",
                                           "step_ms": value * wobble, "items_per_second": 1000 / value,
                                           "batch": int(batch), "mfu": 0.25})
    context = {"parbench_json_schema": "1.8.0", "git_sha": os.environ.get("FAKE_SHA", "0123456789abcdef") if scale == 1.0
               else "fedcba9876543210", "argv": " ".join(sys.argv)}
    Path(flags["benchmark_out"]).write_text(json.dumps({"context": context, "benchmarks": benchmarks}))
    ''')


def fake_bin(directory: Path, scale: float | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / "parbench"
    binary.write_text(FAKE)
    binary.chmod(0o755)
    if scale is not None:
        (directory / "FAKE_SCALE").write_text(str(scale))
    return directory


def run(*arguments, env=None, command=(sys.executable, str(TOOL))):
    environment = {**os.environ, **(env or {})}
    environment.pop("ROUNDS", None)
    environment.update(env or {})
    return subprocess.run([*command, *map(str, arguments)], capture_output=True, text=True, env=environment,
                          check=False, cwd=REPO)


def test_placement_pairs_both_strategies_in_one_process_and_checks_the_bound(tmp_path):
    bin_dir, out = fake_bin(tmp_path / "bin"), tmp_path / "out"
    result = run("placement", bin_dir, out, "--rounds", 2, env={"FAKE_FACTOR_MODEL_PARALLEL": "1.04"})
    assert result.returncode == 0, result.stderr
    assert sorted(path.name for path in out.iterdir()) == ["r1.json", "r2.json"]
    lines = result.stdout.splitlines()
    assert lines[0] == "batch 8, round 1: single 10.00 ms, model_parallel 10.40 ms, ratio 1.040"
    assert lines[2] == ("model_parallel (2 stages on GPU 0) / single, batch 8: median 1.040 over 2 rounds "
                        "(range 1.040-1.040); at most 1.05: met")
    argv = json.loads((out / "r1.json").read_text())["context"]["argv"]
    assert "--strategies=single,model_parallel --devices=0,0 --batch=8,120" in argv
    slower = run("placement", bin_dir, out, "--summarise", env={"ROUNDS": "2", "FAKE_FACTOR_MODEL_PARALLEL": "1.2"})
    assert slower.returncode == 0  # --summarise reads the files as they are: the same ratios
    missed = run("placement", bin_dir, tmp_path / "slow", env={"ROUNDS": "1", "FAKE_FACTOR_MODEL_PARALLEL": "1.06"})
    assert missed.returncode == 1
    assert "median 1.060 over 1 rounds (range 1.060-1.060); at most 1.05: MISSED" in missed.stdout


def test_trace_pairs_each_variant_in_its_own_process(tmp_path):
    bin_dir, out = fake_bin(tmp_path / "bin"), tmp_path / "out"
    result = run("trace", bin_dir, out, env={"FAKE_TRACE_FACTOR": "1.1"})
    assert result.returncode == 0, result.stderr
    assert sorted(path.name for path in out.iterdir()) == [f"{variant}_r{r}.json" for variant in ("plain", "trace")
                                                           for r in (1, 2, 3)]
    assert "--trace=" + str(out / "traces_r2") in json.loads((out / "trace_r2.json").read_text())["context"]["argv"]
    assert result.stdout.splitlines()[-3:] == [
        f"traced / plain, {schedule} split 20 on GPU 0: median 1.100 over 3 pairs (range 1.100-1.100)"
        for schedule in ("1f1b", "interleaved-1f1b", "zb-h1")]


def test_before_after_alternates_two_binaries_and_checks_2_percent(tmp_path):
    before, after = fake_bin(tmp_path / "before"), fake_bin(tmp_path / "after", scale=1.01)
    out = tmp_path / "out"
    result = run("before-after", before / "parbench", after / "parbench", out, "--rounds", 2, "--batch", 64)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "eager, round 1: before 10.00 ms (0123456), after 10.10 ms (fedcba9), after/before 1.0100"
    assert lines[2] == ("single eager, fp32 b64 128x128: after/before median 1.0100 over 2 pairs "
                        "(range 1.0100-1.0100); within 2%: met")
    assert lines[3].startswith("graph, round 1: before 5.00 ms")
    assert "--batch=64" in json.loads((out / "after.r1.json").read_text())["context"]["argv"]
    far = fake_bin(tmp_path / "far", scale=1.05)
    assert run("before-after", before / "parbench", far / "parbench", tmp_path / "far_out", "--rounds", 1).returncode == 1


def test_harness_perturb_runs_each_variant_beside_the_plain_run(tmp_path):
    result = run("harness-perturb", fake_bin(tmp_path / "bin"), tmp_path / "perturb", env={"ROUNDS": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == ("round 1: plain 10.00 ms (mfu 0.2500), trace 10.00 ms (1.000), "
                                             "busy_off 10.00 ms (1.000)")


def test_a_failing_run_stops_with_one_line(tmp_path):
    result = run("placement", fake_bin(tmp_path / "bin"), tmp_path / "out", env={"FAKE_FAIL": "1"})
    assert result.returncode == 1
    assert result.stderr.startswith("paired-runs: round 1, r: ") and result.stderr.rstrip().endswith("exited 3")
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("arguments, message", [
    (("sideways", "a", "b"), "invalid choice: 'sideways'"),
    (("before-after", "a", "b"), "before-after takes BEFORE_BINARY AFTER_BINARY OUT_DIR, got 2 paths"),
    (("trace", "a", "b", "--rounds", "0"), "must be at least 1"),
])
def test_bad_input_exits_2_naming_what_is_allowed(arguments, message):
    result = run(*arguments)
    assert result.returncode == 2
    assert message in result.stderr
