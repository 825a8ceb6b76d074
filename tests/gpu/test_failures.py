"""A case that fails ends alone (docs/RUNNING.md, "Exit status"): the run goes on, the JSON records the
failure, parbench exits 1."""
import os
import signal
import subprocess
import time
import uuid

from conftest import needs_gpus
from parbench_results import cases


@needs_gpus(1)
def test_out_of_memory_fails_its_case_and_the_next_runs(run):
    # ResNet-50 at batch 4096 of 224x224 holds far more than any GPU's memory; tinycnn after it fits.
    ran = run("oom", "--strategies=single", "--models=resnet50,tinycnn", "--batch=4096", "--image=224",
              "--precision=fp32", "--repetitions=2", "--iterations=2", "--warmup=1")
    assert ran.status == 1, ran.last_line()
    resnet, tiny = ran.case("/resnet50/"), ran.case("/tinycnn/")
    assert not resnet.ran and "out of memory" in " ".join(resnet.errors).lower()
    assert tiny.ran and not tiny.errors
    assert "1 failed" in ran.last_line()


def rank_process(parent, rank, deadline):
    """The pid of the child of `parent` whose environment has RANK=rank, once it appears."""
    while time.monotonic() < deadline:
        for child in subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True).stdout.split():
            try:
                environment = open(f"/proc/{child}/environ", "rb").read().split(b"\0")
            except OSError:
                continue
            if f"RANK={rank}".encode() in environment:
                return int(child)
        time.sleep(0.1)
    return None


def processes_with(marker):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if marker.encode() in open(f"/proc/{entry}/environ", "rb").read():
                    found.append(int(entry))
            except OSError:
                pass
    return found


@needs_gpus(2)
def test_a_killed_rank_fails_its_case_and_the_next_case_runs(parbench, tmp_path):
    json_path = tmp_path / "fault.json"
    marker = f"PARBENCH_FAULT_TEST={uuid.uuid4().hex}"
    env = {**os.environ, marker.split("=")[0]: marker.split("=")[1]}
    with open(tmp_path / "fault.stderr", "w+") as stderr:
        process = subprocess.Popen([parbench, "--strategies=ddp", "--precision=fp32", "--overlap=on,off", "--allreduce=off",
                                    "--repetitions=3", "--iterations=200", "--dist-timeout=20",
                                    f"--benchmark_out={json_path}", "--benchmark_out_format=json"],
                                   stdout=subprocess.DEVNULL, stderr=stderr, env=env)
        try:
            rank = rank_process(process.pid, 1, time.monotonic() + 120)
            assert rank is not None, "no rank 1 appeared"
            time.sleep(8)  # into the case: its set-up, warm-up or 3 x 200 timed steps
            os.kill(rank, signal.SIGKILL)
            killed = time.monotonic()
            status = process.wait(timeout=300)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        stderr.seek(0)
        last = stderr.read().strip().splitlines()[-1]
    assert time.monotonic() - killed < 120, "the run took more than 2 minutes to end after the kill"
    assert status == 1, last
    results = cases.load([str(json_path)])
    killed_case = next(case for case in results.cases if "overlap:on" in case.name)
    next_case = next(case for case in results.cases if "overlap:off" in case.name)
    assert killed_case.errors and all("rank 1 was killed by signal 9" in error for error in killed_case.errors)
    assert next_case.ran and not next_case.errors
    assert processes_with(marker) == [], "rank processes outlived the run"
