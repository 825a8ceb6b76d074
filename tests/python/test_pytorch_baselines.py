"""Tests the PyTorch baselines (benchmarks/pytorch/) at tiny shapes on the CPU, their JSON
(docs/JSON.md, "PyTorch baselines"), and reports/make_report.py's PyTorch table against the
fixture fixtures/pytorch_baselines.json beside parbench's fixtures. What needs GPUs
(nn.DataParallel, CUDA graphs) is tested as far as the CPU goes: the arguments, the skip it
records and the JSON it writes."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from parbench_results import baselines as pb
from scripts import REPO

torch = pytest.importorskip("torch")

BASELINES = REPO / "benchmarks" / "pytorch"
sys.path.insert(0, str(BASELINES))
import baseline_common as bc  # noqa: E402
import baseline_models as bm  # noqa: E402
import ddp  # noqa: E402
import fsdp_tp  # noqa: E402
import pipelining  # noqa: E402
import single  # noqa: E402,F401
import tutorial  # noqa: E402,F401

FIXTURES = Path(__file__).resolve().with_name("fixtures")
BASELINE_FIXTURE = FIXTURES / "pytorch_baselines.json"
PARBENCH_RUN = [FIXTURES / "gpu_run.json", FIXTURES / "gpu_run_ddp.json"]
MAKE_REPORT = REPO / "reports" / "make_report.py"
# One thread per process: the ranks share the machine's cores.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PARBENCH_GIT_SHA": "test"}
TINY_RESNET = ["--device", "cpu", "--model", "resnet-tiny", "--image", "32", "--batch", "2",
               "--warmup", "1", "--steps", "1", "--repetitions", "2"]
TINY_GPT = ["--device", "cpu", "--model", "tinygpt", "--seq", "8", "--batch", "4",
            "--warmup", "1", "--steps", "1", "--repetitions", "2"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


def run_script(script, *args, torchrun=False, ranks=2, env=None):
    launcher = [*TORCHRUN[:-1], f"--nproc-per-node={ranks}"] if torchrun else [sys.executable]
    command = [*launcher, str(BASELINES / script), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env={**ENV, **(env or {})}, timeout=240,
                          check=False)


def read(path):
    document = json.loads(Path(path).read_text())
    assert document["pytorch_baseline_schema"] == bc.SCHEMA_VERSION
    assert document["context"]["devices"] == "cpu" and document["context"]["git_sha"] == "test"
    # The report's reader takes every file a baseline writes.
    assert len(pb.read_baselines(str(path))) == len(document["results"])
    return document["results"]


def ran(result):
    assert result["error"] is None, result["error"]
    assert len(result["step_ms"]) == result["repetitions"]
    assert result["step_ms_median"] == pytest.approx(statistics.median(result["step_ms"]))
    assert result["step_ms_spread"]["min"] <= result["step_ms_median"] <= result["step_ms_spread"]["max"]
    global_batch = result["details"].get("per_rank_batch", result["fields"]["batch"]) * \
        (result["fields"]["gpus"] if result["strategy"] == "ddp" else 1)
    if result["strategy"] == "fsdp2_tp":  # --batch is one replica's; the tp ranks of a replica share it
        global_batch = result["fields"]["batch"] * fsdp_tp.parse_mesh(result["fields"]["mesh"])[0]
    assert result["items_per_second"] == pytest.approx(global_batch * 1e3 / result["step_ms_median"])


# --- the scripts, on the CPU ------------------------------------------------------------------

def test_tutorial_runs_its_three_models_on_the_cpu(tmp_path):
    out = tmp_path / "tutorial.json"
    # Micro-batches of 2: batch-norm in training needs more than one value per channel.
    done = run_script("tutorial.py", *TINY_RESNET, "--batch", "4", "--split-sizes", "2", "--out", out)
    assert done.returncode == 0, done.stderr
    results = read(out)
    assert [r["strategy"] for r in results] == ["single", "model_parallel", "pipeline"]
    for result in results:
        ran(result)
        assert result["tflops"] > 0  # the FLOPs counted on the meta device
    assert results[2]["fields"] == {"strategy": "pipeline", "model": "resnet-tiny", "batch": 4, "image": 32,
                                    "precision": "fp32", "data": "device", "gpus": 2, "split": 2,
                                    "schedule": "tutorial", "lanes": 1, "graph": "off"}


def test_tutorial_method_times_as_the_tutorial(tmp_path):
    out = tmp_path / "tutorial.json"
    done = run_script("tutorial.py", *TINY_RESNET, "--method", "tutorial", "--variants", "single", "--out", out)
    assert done.returncode == 0, done.stderr
    [result] = read(out)
    ran(result)
    assert (result["timer"], result["fields"]["data"]) == ("host", "host")
    assert (result["warmup"], result["steps_per_repetition"], result["repetitions"]) == (0, 3, 10)


def test_single_gpt_eager_and_a_graph_skipped_on_the_cpu(tmp_path):
    out = tmp_path / "single.json"
    done = run_script("single.py", *TINY_GPT, "--precision", "fp32,bf16", "--variants", "eager,graph", "--out", out)
    assert done.returncode == 0, done.stderr
    results = read(out)
    assert [(r["fields"]["precision"], r["variant"]) for r in results] == [
        ("fp32", "eager"), ("fp32", "graph"), ("bf16", "eager"), ("bf16", "graph")]
    for result in results[0::2]:
        ran(result)
        assert result["tokens_per_second"] == pytest.approx(result["items_per_second"] * 8)
    for result in results[1::2]:
        assert result["error"] == "skipped: CUDA graphs need a GPU" and result["step_ms_median"] is None
        assert result["fields"]["graph"] == "on"


def test_data_parallel_records_its_skip_without_gpus(tmp_path):
    out = tmp_path / "dp.json"
    done = run_script("data_parallel.py", *TINY_RESNET, "--batch", "4,8", "--out", out)
    assert done.returncode == 0, done.stderr
    results = read(out)
    assert [r["fields"]["batch"] for r in results] == [4, 8]
    for result in results:
        assert result["error"].startswith("skipped: nn.DataParallel needs GPUs")
        assert result["fields"]["replicate"] == "broadcast" and result["baseline"] == "torch.nn.DataParallel"


def test_ddp_under_torchrun_with_gloo(tmp_path):
    out = tmp_path / "ddp.json"
    done = run_script("ddp.py", *TINY_RESNET, "--out", out, torchrun=True)
    assert done.returncode == 0, done.stderr
    [result] = read(out)
    ran(result)
    assert result["details"]["backend"] == "gloo" and len(result["details"]["rank_median_step_ms"]) == 2
    assert {k: result["fields"][k] for k in ("gpus", "bucket_mib", "overlap", "scaling")} == {
        "gpus": 2, "bucket_mib": 25, "overlap": "on", "scaling": "weak"}


def test_pipelining_every_schedule_under_torchrun_with_gloo(tmp_path):
    out = tmp_path / "pipe.json"
    # 4 sequences in micro-batches of 2: 1f1b needs as many micro-batches as stages, and
    # interleaved-1f1b's 4 stages run 2 per rank.
    done = run_script("pipelining.py", *TINY_GPT, "--split-sizes", "2,3", "--precision", "bf16", "--out", out,
                      torchrun=True)
    assert done.returncode == 0, done.stderr
    results = read(out)
    assert [r["variant"] for r in results] == ["gpipe", "1f1b", "interleaved-1f1b"] * 2
    for result in results[:3]:
        ran(result)
        assert result["details"]["micro_batches"] == 2
    assert results[0]["details"]["cut"] == "embed,h.0|h.1,head"
    assert results[2]["details"]["cut"] == "embed|h.0|h.1|head" and results[2]["fields"]["chunks"] == 2
    for result in results[3:]:  # split 3 does not divide 4: pipelining's micro-batches would differ
        assert result["error"].startswith("skipped: split 3 does not divide batch 4")


def one_process_losses(model, seq, global_batch, optimizer, steps):
    """Plain PyTorch in one process: the model and the global batch as fsdp_tp.py draws them (seeds
    0 and 1000), the mean loss of each of `steps` steps (fp32)."""
    torch.manual_seed(0)
    reference = bm.make_model(model)
    torch.manual_seed(1000)
    inputs, targets = bc.make_batch(argparse.Namespace(model=model, seq=seq), global_batch, "fp32", "cpu", "cpu")
    update = torch.optim.AdamW(reference.parameters(), lr=1e-3, weight_decay=0.01) if optimizer == "adamw" \
        else torch.optim.SGD(reference.parameters(), lr=1e-3)
    losses = []
    for _ in range(steps):
        update.zero_grad()
        loss = bc.compute_loss(reference(inputs), targets)
        loss.backward()
        update.step()
        losses.append(loss.item())
    return losses


# 4 ranks as dp2.tp2: FSDP2 over 2 replicas of 2 tensor-parallel ranks each. The Llama with sequence
# parallelism, vocabulary-parallel loss and checkpointed blocks under AdamW; the GPT without sequence
# parallelism, with the whole logits' loss and no resharding, under SGD.
@pytest.mark.parametrize("model, options, optimizer", [
    ("tinyllama", ["--sequence-parallel=on", "--checkpoint=blocks"], "adamw"),
    ("tinygpt", ["--loss-parallel=off", "--reshard-after-forward=off"], "sgd"),
])
def test_fsdp_tp_on_a_2d_mesh_trains_as_one_process_does(tmp_path, model, options, optimizer):
    out = tmp_path / "mesh.json"
    done = run_script("fsdp_tp.py", "--device", "cpu", "--model", model, "--seq", "8", "--batch", "2",
                      "--precision", "fp32", "--optimizer", optimizer, "--mesh", "dp2.tp2", *options,
                      "--warmup", "2", "--steps", "1", "--repetitions", "2", "--check-loss", "--out", out,
                      torchrun=True, ranks=4)
    assert done.returncode == 0, done.stderr
    [result] = read(out)
    ran(result)
    details, fields = result["details"], result["fields"]
    assert (details["dp"], details["tp"], details["global_batch"]) == (2, 2, 4)
    assert details["backend"] == "gloo" and len(details["rank_median_step_ms"]) == 4
    assert details["loss_parallel"] == ("off" if "--loss-parallel=off" in options else "on")
    assert {k: fields[k] for k in ("strategy", "gpus", "mesh", "optimizer", "seq")} == {
        "strategy": "fsdp2_tp", "gpus": 4, "mesh": "dp2.tp2", "optimizer": optimizer, "seq": 8}
    assert result["tokens_per_second"] == pytest.approx(result["items_per_second"] * 8)
    flops = (bc.llama_forward_flops_per_sample if model == "tinyllama" else bc.gpt_forward_flops_per_sample)(model, 8)
    assert result["tflops"] == pytest.approx(3 * flops * result["items_per_second"] / 1e12)
    # The first loss checks the forward, the second the gradients and the update: both the one
    # process's on the global batch of 4 sequences, within fp32 rounding; the step's change of the
    # loss (SGD at lr 1e-3 moves it by 0.1%) within 0.1% of its own size, so that a gradient 1% off fails.
    expected = one_process_losses(model, 8, 4, optimizer, 2)
    losses = details["warmup_losses"]
    assert losses == pytest.approx(expected, rel=1e-6)
    assert losses[1] - losses[0] == pytest.approx(expected[1] - expected[0], rel=1e-3)


@pytest.mark.parametrize("args, world, message", [
    (["--mesh=dp2.tp2"], 2, "--mesh=dp2.tp2 has 4 ranks, torchrun started 2"),
    (["--mesh=dp2.pp2"], 4, "--mesh=dp2.pp2: unknown axis 'pp' (dp, tp)"),
    (["--mesh=tp3"], 3, "--mesh=tp3: tp 3 does not divide tinyllama's heads (8)"),
    (["--mesh=tp2", "--sequence-parallel", "--seq=9"], 2, "tp 2 does not divide --seq=9"),
    (["--mesh=dp2.dp2"], 4, "axis 'dp' given twice"),
    (["--mesh=dp2", "--model=resnet-tiny"], 2, "fsdp_tp.py trains the GPT and Llama models only"),
])
def test_fsdp_tp_refuses_a_bad_mesh_in_one_line(tmp_path, args, world, message):
    # torchrun's variables without torchrun: the refusal comes before any rank waits for another.
    env = {"RANK": "0", "WORLD_SIZE": str(world), "LOCAL_RANK": "0"}
    done = run_script("fsdp_tp.py", "--device", "cpu", "--model", "tinyllama", *args, "--out", tmp_path / "x.json",
                      env=env)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="nn.DataParallel and CUDA graphs need 2 GPUs")
def test_gpu_baselines_run(tmp_path):
    done = run_script("data_parallel.py", "--model", "resnet-tiny", "--image", "32", "--batch", "8",
                      "--warmup", "1", "--steps", "1", "--repetitions", "1", "--out", tmp_path / "dp.json")
    assert done.returncode == 0, done.stderr
    done = run_script("single.py", "--model", "tinygpt", "--seq", "8", "--batch", "4", "--variants", "graph",
                      "--warmup", "1", "--steps", "1", "--repetitions", "1", "--out", tmp_path / "graph.json")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("module, args, message", [
    ("single", ["--model", "resnet51"], "--model=resnet51: unknown"),
    ("single", ["--model", "tinygpt", "--seq", "2048"], "longer than tinygpt's context"),
    ("tutorial", ["--model", "gpt2-medium"], "the tutorial trains ResNets only"),
    ("pipelining", ["--model", "tinyllama"], "pipelining.py cuts the ResNet and GPT models only"),
    ("pipelining", ["--model", "resnet50", "--cut", "stem,layer1|layer2"], None),
])
def test_bad_input_is_refused(module, args, message):
    parse = __import__(module).parse
    if message is None:  # parses; the cut is checked against the stages, as every rank does first
        args = parse(["--device", "cpu", "--out", "x.json", *args])
        with pytest.raises(bc.UsageError, match="stage 'layer3.0' is in no part"):
            __import__(module).cut_for(args, 2, interleaved=False, precision="fp32")
        return
    with pytest.raises(bc.UsageError, match=re.escape(message)):
        parse(["--device", "cpu", "--out", "x.json", *args])


@pytest.mark.parametrize("script, args, message", [
    ("single.py", ["--batch", "0"], "--batch: '0' needs positive integers"),
    ("ddp.py", [], "ddp.py: error: run under torchrun"),
])
def test_bad_input_is_one_line_and_status_2(tmp_path, script, args, message):
    done = run_script(script, "--device", "cpu", *args, "--out", tmp_path / "x.json")
    assert done.returncode == 2
    assert message in done.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "x.json").exists()


def test_run_all_dry_run_lists_every_baseline_and_refuses_an_unknown_set(tmp_path):
    script = BASELINES / "run_all.sh"
    done = subprocess.run(["bash", str(script), "--dry-run", str(tmp_path), "resnet", "tutorial-method", "gpt",
                           "gpt-compile"], capture_output=True, text=True, env=ENV, check=False)
    assert done.returncode == 0, done.stderr
    names = [line.split(":")[0] for line in done.stdout.splitlines()]
    assert names == ["tutorial", "single_resnet_graph", "data_parallel", "ddp", "pipelining_resnet",
                     "tutorial_method", "single_gpt", "pipelining_gpt", "single_gpt_compile"]
    assert all(f"--out {tmp_path}/{name}.json" in line for name, line in zip(names, done.stdout.splitlines()))
    bad = subprocess.run(["bash", str(script), str(tmp_path), "bogus"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "unknown set 'bogus'" in bad.stderr


@pytest.mark.parametrize("nproc, mesh", [("4", "dp2.tp2"), ("2", "dp1.tp2"), ("3", "dp3")])
def test_run_all_mesh_set_takes_its_ranks_from_nproc(tmp_path, nproc, mesh):
    script = BASELINES / "run_all.sh"
    done = subprocess.run(["bash", str(script), "--dry-run", str(tmp_path), "mesh"], capture_output=True, text=True,
                          env={**ENV, "NPROC": nproc}, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["fsdp_tp_llama", "fsdp_gpt_reshard_on", "fsdp_gpt_reshard_off"]
    assert all(f"--nproc-per-node={nproc} " in line and "fsdp_tp.py" in line for line in lines)
    assert "--model llama3-8b --seq 8192 --batch 2 " in lines[0] and f"--mesh {mesh} " in lines[0]
    for line, reshard in zip(lines[1:], ("on", "off")):
        assert "--model gpt-2.7b" in line and f"--mesh dp{nproc} --reshard-after-forward {reshard} " in line
    # Not in the default sets: the 2-D mesh wants 4 GPUs.
    default = subprocess.run(["bash", str(script), "--dry-run", str(tmp_path)], capture_output=True, text=True,
                             env=ENV, check=False)
    assert "fsdp_tp.py" not in default.stdout


def test_run_all_without_a_gpu_says_to_pass_cpu_before_running_anything(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(BASELINES / "run_all.sh"), str(out), "resnet"], capture_output=True, text=True,
                          env={**ENV, "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable}, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr == ("run_all.sh: error: no GPU visible: the baselines' shapes are sized for GPUs "
                           "(--cpu runs tiny shapes on the CPU)\n")
    assert not out.exists()


# --- the shared pieces --------------------------------------------------------------------------

def test_flops_and_datasheet_peaks_are_parbenchs():
    # docs/METRICS.md: gpt2-medium at T = 1024 trains at 2.42 GFLOP per token; ResNet-50 at
    # 224x224 is 8.18 GFLOP per image forward.
    assert 3 * bc.gpt_forward_flops_per_sample("gpt2-medium", 1024) / 1024 == pytest.approx(2.425e9, rel=1e-3)
    flops = bc.resnet_forward_flops_per_sample(lambda: bm.make_resnet("resnet50"), 224)
    assert flops == pytest.approx(8.18e9, rel=1e-3)
    assert bc.datasheet_peak("NVIDIA H100 80GB HBM3", "bf16")[0] == 989.4
    assert bc.datasheet_peak("NVIDIA H100 PCIe", "tf32")[0] == 378.0
    assert bc.datasheet_peak("NVIDIA H200 NVL", "fp32")[0] == 60.0
    assert bc.datasheet_peak("NVIDIA L4", "bf16") is None


def test_cuts_are_parbenchs():
    # parbench's stages (models/resnet.cpp): the stem, each block by its module path, the head;
    # a layer's name stands for its blocks, and a part holding a whole layer writes its name.
    names, groups = bm.stage_names("resnet50"), bm.stage_groups("resnet50")
    assert len(names) == 18 and names[:3] == ["stem", "layer1.0", "layer1.1"] and names[-2:] == ["layer4.2", "head"]
    model = bm.make_model("resnet50")
    assert [name for name, _ in bm.named_stages("resnet50", model)] == names
    tutorial = bm.parse_cut(bm.default_cut("resnet50", 2), names, 2, groups)
    assert tutorial[0] == ["stem", *groups["layer1"], *groups["layer2"]]
    assert tutorial[1] == [*groups["layer3"], *groups["layer4"], "head"]
    assert bm.format_cut(tutorial, groups) == "stem,layer1,layer2|layer3,layer4,head"
    # Where parbench's cut is measured: the blocks in equal parts, for 4 ranks and 4 ranks x 2 chunks.
    assert bm.default_cut("resnet50", 4) == ("stem,layer1,layer2.0|layer2.1,layer2.2,layer2.3,layer3.0|"
                                             "layer3.1,layer3.2,layer3.3,layer3.4|layer3.5,layer4,head")
    for parts in (4, 8, 16):
        cut = bm.parse_cut(bm.default_cut("resnet50", parts), names, parts, groups)
        assert [name for part in cut for name in part] == names
        assert max(map(len, cut)) - min(map(len, cut)) <= 2  # the stem and head ride along
    mixed = "stem,layer1,layer2.0|layer2.1,layer2.2,layer2.3,layer3|layer4,head"
    assert bm.format_cut(bm.parse_cut(mixed, names, 3, groups), groups) == mixed
    medium = bm.default_cut("gpt2-medium", 2).split("|")
    assert medium[0].startswith("embed,h.0,") and medium[0].endswith(",h.11") and medium[1].endswith(",h.23,head")
    for bad in ("stem,layer1|layer3,layer2,layer4,head", "stem,layer1,layer2,layer3,layer4,head", "stem|x",
                "stem,layer1,layer1.2,layer2|layer3,layer4,head", "stem,layer1.3|layer2,layer3,layer4,head"):
        with pytest.raises(ValueError):
            bm.parse_cut(bad, names, 2, groups)
    with pytest.raises(ValueError, match="no default cut of resnet50 into 17 parts"):
        bm.default_cut("resnet50", 17)


def test_pipelining_takes_parbenchs_cut_from_its_json():
    # A file with fields (schema 1.4.0), and one whose names alone say the case.
    cut = pipelining.parbench_cut(FIXTURES / "schema_1_4_plugin.json", "tinycnn", "fp32", 2, False, 2)
    assert cut == "stem,layer1|layer2,head"
    run = FIXTURES / "gpu_runs" / "h100_gpt_schedules.json"
    assert pipelining.parbench_cut(run, "gpt2-small", "bf16", 2, True, 2) == \
        "embed,h.0,h.1,h.2|h.3,h.4,h.5|h.6,h.7,h.8|h.9,h.10,h.11,head"
    assert pipelining.parbench_cut(run, "gpt2-medium", "bf16", 2, False, 2) is None
    args = pipelining.parse(["--device", "cpu", "--out", "x.json", "--model", "gpt2-small", "--cuts-from", str(run)])
    cut, source = pipelining.cut_for(args, 2, interleaved=False, precision="bf16")
    assert source == "parbench" and cut[1][-1] == "head"
    cut, source = pipelining.cut_for(args, 2, interleaved=False, precision="fp32")
    assert source in ("parbench", "default")


def test_a_distributed_step_is_the_slowest_ranks():
    gathered = [{"times": [[1.0, 4.0], [2.0, 2.0]]}, {"times": [[3.0, 1.0], [2.0, 6.0]]}]
    repetitions, spread, rank_medians = ddp.combine(gathered)
    assert repetitions == [3.5, 4.0]  # per step the slower rank, a repetition their mean
    assert rank_medians == [2.0, 2.5]
    assert spread == pytest.approx(statistics.median([(2.5 - 2.0) / 2.25, (4.0 - 2.0) / 3.0]))


def test_gpt_matches_parbenchs_parameters():
    with torch.device("meta"):
        model = bm.GPT("gpt2-medium")
    config = bc.GPT_CONFIGS["gpt2-medium"]
    d, layers, vocabulary = config["width"], config["layers"], config["vocabulary"]
    non_embedding = layers * (12 * d * d + 13 * d) + 2 * d + vocabulary * d
    total = sum(p.numel() for p in model.parameters())
    assert total == non_embedding + vocabulary * d + config["context"] * d  # untied head


def test_llama_matches_parbenchs_parameters_and_flops():
    # docs/STRATEGIES.md: llama3-8b has 8.03 G parameters; docs/METRICS.md: it trains at 57.9 GFLOP
    # per token at T = 8192 (6 N' + 12 L H h T, N' = 7.50 G without the token embedding).
    with torch.device("meta"):
        model = bm.Llama("llama3-8b")
    total = sum(p.numel() for p in model.parameters())
    assert total == pytest.approx(8.03e9, rel=1e-3)
    embedding = 128256 * 4096
    n = total - embedding
    assert n == pytest.approx(7.50e9, rel=1e-3)
    flops = bc.llama_forward_flops_per_sample("llama3-8b", 8192)
    assert flops == pytest.approx(8192 * (2 * n + 4 * 32 * 4096 * 8192))
    assert 3 * flops / 8192 == pytest.approx(57.9e9, rel=1e-3)
    # llama3-1b ties the head to the embedding: one weight, but the head's product still counts.
    with torch.device("meta"):
        tied = bm.Llama("llama3-1b")
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    tied_total = sum(p.numel() for p in tied.parameters())
    assert bc.llama_forward_flops_per_sample("llama3-1b", 1) == pytest.approx(2 * tied_total + 4 * 16 * 2048)


@pytest.mark.parametrize("name", ["tinyllama", "llama3-1b-shape"])
def test_llama_matches_hugging_faces(name, monkeypatch):
    """The baseline's Llama against transformers' LlamaForCausalLM with the same weights: grouped-query
    attention, Llama 3.1's rotary scaling and (llama3-1b's shape, scaled down) a tied head."""
    transformers = pytest.importorskip("transformers")
    if name != "tinyllama":  # llama3-1b's kind of head and scaling at tinyllama's size
        monkeypatch.setitem(bc.LLAMA_CONFIGS, name, {**bc.LLAMA_CONFIGS["tinyllama"], "tied": True,
                                                     "rope_factor": 32.0, "heads": 4, "kv_heads": 1})
    c = bc.LLAMA_CONFIGS[name]
    torch.manual_seed(0)
    ours = bm.Llama(name).double()
    config = transformers.LlamaConfig(
        hidden_size=c["width"], num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
        num_key_value_heads=c["kv_heads"], intermediate_size=c["ffn"], vocab_size=c["vocabulary"],
        max_position_embeddings=c["context"], rms_norm_eps=bc.LLAMA_NORM_EPS, rope_theta=bc.LLAMA_ROPE_THETA,
        tie_word_embeddings=c["tied"], attention_bias=False, mlp_bias=False,
        rope_scaling={"rope_type": "llama3", "factor": c["rope_factor"], "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": c["rope_original_context"]})
    config._attn_implementation = "eager"
    theirs = transformers.LlamaForCausalLM(config).double()
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert unexpected == [] and missing == []
    tokens = torch.randint(c["vocabulary"], (2, 300))  # past the original context of 256: every band
    ours_logits, their_logits = ours(tokens), theirs(input_ids=tokens).logits
    assert (ours_logits - their_logits).norm() / their_logits.norm() < 1e-6
    with torch.no_grad():  # not vacuous: rotary positions without the scaling differ far more
        ours.model.layers[0].self_attn.inv_freq.mul_(c["rope_factor"])
        assert (ours(tokens) - their_logits).norm() / their_logits.norm() > 1e-4


# --- the report ---------------------------------------------------------------------------------

def parbench_median(run_name_prefix):
    values = []
    for path in PARBENCH_RUN:
        for entry in json.loads(path.read_text())["benchmarks"]:
            if (entry["run_type"] == "iteration" and not entry.get("error_occurred")
                    and entry["run_name"].startswith(run_name_prefix)):
                values.append(entry["step_ms"])
    return statistics.median(values)


def table_rows(text, heading):
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]


def test_report_compares_each_baseline_with_its_parbench_case(tmp_path):
    done = subprocess.run([sys.executable, str(MAKE_REPORT), str(tmp_path), *map(str, PARBENCH_RUN),
                           str(BASELINE_FIXTURE)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "REPORT.md").read_text()
    assert "## PyTorch" in text
    rows = [row for row in table_rows(text, "## PyTorch") if not row.startswith("| set-up")
            and not row.startswith("| baseline")]
    fixture = {r["name"]: r for r in json.loads(BASELINE_FIXTURE.read_text())["results"]}
    prefix = "train/{}/resnet50/batch:120/image:128/precision:fp32/data:device"
    expected = {
        "tutorial resnet50": (prefix.format("single") + "/manual_time", "pytorch/tutorial/single"),
        "tutorial ModelParallelResNet50": (prefix.format("model_parallel") + "/gpus:2/", "pytorch/tutorial/model_parallel"),
        "torch.distributed.pipelining (gpipe)": (prefix.format("pipeline") + "/gpus:2/split:20/schedule:gpipe/",
                                                 "pytorch/pipelining/resnet50/batch:120/precision:fp32/gpus:2/split:20/schedule:gpipe"),
        "torch.distributed.pipelining (1f1b)": (prefix.format("pipeline") + "/gpus:2/split:20/schedule:1f1b/",
                                                "pytorch/pipelining/resnet50/batch:120/precision:fp32/gpus:2/split:20/schedule:1f1b"),
        "torch.nn.parallel.DistributedDataParallel": (prefix.format("ddp") + "/gpus:2/bucket_mib:25/overlap:on/",
                                                      "pytorch/ddp/"),
    }
    matched = {}
    for row in rows[: len(expected)]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[0] == "resnet50, batch 120, image 128\u00d7128, fp32, data on device"
        matched[cells[2]] = cells[1:]
    assert set(matched) == set(expected)
    for label, (run_prefix, baseline_prefix) in expected.items():
        ours = parbench_median(run_prefix)
        [theirs] = [r["step_ms_median"] for name, r in fixture.items() if name.startswith(baseline_prefix)]
        cells = matched[label]
        assert float(cells[2].replace(",", "")) == pytest.approx(ours, abs=0.005)
        assert float(cells[3].replace(",", "")) == pytest.approx(theirs, abs=0.005)
        assert float(cells[4]) == pytest.approx(ours / theirs, abs=0.0005)
    # Listed without a match: no tutorial schedule in the run, the failed interleaved case, the
    # old file's data_parallel being LibTorch's clone, and no gpt2-medium case.
    unmatched = text.split("Baselines without a matching parbench case that ran:", 1)[1].split("\n## ", 1)[0]
    for name in ("pytorch/tutorial/pipeline/", "schedule:interleaved-1f1b/chunks:2", "pytorch/data_parallel/",
                 "pytorch/single/gpt2-medium/"):
        assert name in unmatched
    assert "did not run: rank 1: OutOfMemoryError" in unmatched


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(pytorch_baseline_schema="2.0.0"), "has major version 2"),
    (lambda d: d.pop("results"), "needs a 'context' object and a 'results' list"),
    (lambda d: d["results"][0].pop("fields"), "results[0]"),
    (lambda d: d["results"][0].update(step_ms_median=None), "neither an 'error' nor a 'step_ms_median'"),
])
def test_report_refuses_a_bad_baseline_file(tmp_path, mutate, message):
    document = json.loads(BASELINE_FIXTURE.read_text())
    mutate(document)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(MAKE_REPORT), str(out), *map(str, PARBENCH_RUN), str(bad)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr
    assert not out.exists()


def test_report_needs_a_parbench_file(tmp_path):
    done = subprocess.run([sys.executable, str(MAKE_REPORT), str(tmp_path / "out"), str(BASELINE_FIXTURE)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "no parbench JSON given" in done.stderr


def test_matching_implies_the_fields_older_names_leave_out():
    assert pb.fields_agree("pipeline", {"split": "20", "schedule": "gpipe"},
                           {"split": "20", "schedule": "gpipe", "lanes": "1", "graph": "off"})
    assert not pb.fields_agree("pipeline", {"split": "20"}, {"split": "20", "lanes": "2"})
    assert not pb.fields_agree("data_parallel", {"gpus": "2"}, {"gpus": "2", "replicate": "broadcast"})
    assert not pb.fields_agree("single", {"graph": "on"}, {})
    assert re.fullmatch(r"\d+\.\d+\.\d+", bc.SCHEMA_VERSION)
