"""A 2-"node" ddp run on this machine (docs/DISTRIBUTED.md, "On several nodes").

Two torchrun agents, as two nodes would start them: `--nnodes=2 --nproc-per-node=1` with the c10d
rendezvous on 127.0.0.1, each starting one rank of parbench on the CPU. The rendezvous, the store
and the ranks' traffic go over the loopback interface: this tests the launch, the rendezvous and
what the JSON records of a multi-node run, not a network between machines. Every wait of
parbench's has its timeout (--dist-timeout), and the test has its own, so CI never hangs.
"""
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

BINARY = os.environ.get("PARBENCH_BINARY")
DEADLINE_S = 240  # the whole test: two agents' start, the rendezvous and a few seconds of ddp
RUN = ["--preset=cpu", "--models=tinycnn", "--batch=4", "--image=16", "--warmup=1", "--repetitions=2",
       "--iterations=2", "--strategies=ddp", "--allreduce=off", "--dist-timeout=60"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    if not BINARY:
        pytest.skip("PARBENCH_BINARY is set by ctest (tests/CMakeLists.txt)")
    out = tmp_path_factory.mktemp("two_nodes")
    port = free_port()
    agents = []
    for node in range(2):
        # Each "node" names its own network interface, as a cluster's nodes would.
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", NCCL_SOCKET_IFNAME="lo",
                   GLOO_SOCKET_IFNAME="lo", PARBENCH_TEST_NODE=str(node))
        agents.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
             f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=parbench-two-nodes", "--max-restarts=0",
             "--no-python", BINARY, *RUN, f"--benchmark_out={out / 'run.json'}", "--benchmark_out_format=json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=out, start_new_session=True))
    outputs = []
    try:
        for agent in agents:
            outputs.append(agent.communicate(timeout=DEADLINE_S))
    except subprocess.TimeoutExpired:
        for agent in agents:
            os.killpg(agent.pid, signal.SIGKILL)
        pytest.fail(f"the two torchrun agents did not finish within {DEADLINE_S} s")
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
    for agent, (stdout, stderr) in zip(agents, outputs):
        assert agent.returncode == 0, stdout + stderr
    return json.loads((out / "run.json").read_text()), outputs


def test_the_ddp_case_ran_on_two_ranks_one_per_node(two_nodes):
    document, _ = two_nodes
    entries = [entry for entry in document["benchmarks"] if entry["run_name"].startswith("train/ddp/")]
    assert entries and not any(entry.get("error_occurred") for entry in entries), entries
    assert all(entry["world_size"] == 2 for entry in entries if entry["run_type"] == "iteration")
    assert "backend=store" in entries[0]["label"]


def test_the_json_records_each_ranks_host_node_and_launcher_variables(two_nodes):
    document, _ = two_nodes
    context = document["context"]
    assert context["parbench_json_schema"] == "1.17.0"
    hosts = json.loads(context["rank_hosts"])
    assert len(hosts) == 2
    ranks = json.loads(context["rank_launch"])
    assert [rank["rank"] for rank in ranks] == [0, 1]
    assert [rank["host"] for rank in ranks] == hosts
    # torchrun's GROUP_RANK is the node's rank: one rank on each of the two nodes.
    assert sorted(rank["node_rank"] for rank in ranks) == [0, 1], ranks
    assert {rank["node_rank_from"] for rank in ranks} == {"GROUP_RANK"}
    for rank in ranks:
        variables = rank["variables"]
        assert variables["RANK"] == str(rank["rank"])
        assert variables["WORLD_SIZE"] == "2" and variables["LOCAL_WORLD_SIZE"] == "1"
        assert variables["LOCAL_RANK"] == "0" and variables["GROUP_WORLD_SIZE"] == "2"
        assert variables["GROUP_RANK"] == str(rank["node_rank"])
        assert variables["MASTER_ADDR"] and variables["MASTER_PORT"]
        assert variables["TORCHELASTIC_RUN_ID"] == "parbench-two-nodes"
        assert variables["NCCL_SOCKET_IFNAME"] == "lo" and variables["GLOO_SOCKET_IFNAME"] == "lo"
    # Rank 0's own launcher variables, and its network variables among the libraries'.
    launcher = json.loads(context["launcher_environment"])
    assert launcher["RANK"] == "0" and launcher["GROUP_RANK"] == str(ranks[0]["node_rank"])
    environment = json.loads(context["environment"])
    assert environment["GLOO_SOCKET_IFNAME"] == "lo" and environment["NCCL_SOCKET_IFNAME"] == "lo"


def test_rank_0_prints_the_verdict_and_no_gpu_errors(two_nodes):
    _, outputs = two_nodes
    stdout = "".join(out for out, _ in outputs)
    assert "Verdict for tinycnn" in stdout, stdout
    for _, stderr in outputs:
        assert "gpuGetDeviceCount" not in stderr, stderr
