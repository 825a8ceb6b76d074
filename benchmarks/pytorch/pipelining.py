"""torch.distributed.pipelining under torchrun: one process per GPU, the model cut where parbench
cuts it (ResNet-50 on 2 GPUs: the tutorial's stem..layer2 | layer3..head; interleaved 1F1B with 2
chunks per rank: 4 stages, stage s on rank s mod N), the batch split into micro-batches of
--split-sizes images or sequences (batch 120 at split 20: 6 micro-batches), run by ScheduleGPipe,
Schedule1F1B or ScheduleInterleaved1F1B with the loss (parbench's: MSE on one-hot labels, next-token
cross-entropy for a GPT) taken on the last stage, then SGD lr 1e-3 on every rank's stages.
Timing as ddp.py: per step the slowest rank's time, a repetition the mean of its steps, the
median repetition.

  torchrun --standalone --nproc-per-node=2 benchmarks/pytorch/pipelining.py --out pipe.json --split-sizes 20
  torchrun --standalone --nproc-per-node=2 benchmarks/pytorch/pipelining.py --out gpt.json \\
      --model gpt2-medium --split-sizes 4 --cut 'embed,h.0,...,h.11|h.12,...,h.23,head'
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

import baseline_common as bc
from baseline_models import (RESNET_SOURCE, cut_modules, default_cut, format_cut, make_model, parse_cut, stage_groups,
                             stage_names)
from ddp import combine, gather_times, init_distributed, line_up

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved-1f1b": ScheduleInterleaved1F1B}
BASELINE = "torch.distributed.pipelining"


def parse(argv):
    parser = bc.common_parser(__doc__.split("\n")[0], model_default="resnet50")
    parser.add_argument("--schedules", type=bc.choice_list(list(SCHEDULES)), default=list(SCHEDULES),
                        help="gpipe,1f1b,interleaved-1f1b; default all")
    parser.add_argument("--split-sizes", type=bc.int_list, default=None,
                        help="micro-batch sizes; default 20 (language models 4)")
    parser.add_argument("--chunks", type=bc.positive_int, default=2, help="interleaved-1f1b: stages per rank")
    parser.add_argument("--cut", default=None, help="stages per rank in parbench's --cut syntax; default the "
                        "tutorial's cut for ResNet on 2 ranks, else the blocks in equal parts")
    parser.add_argument("--interleaved-cut", default=None,
                        help="the same for interleaved-1f1b's ranks x chunks parts; default the blocks in "
                             "equal parts, the first stage with the first and the head with the last")
    parser.add_argument("--cuts-from", type=Path, default=None, metavar="PARBENCH_JSON",
                        help="take each cut from the label of parbench's matching pipeline case in this "
                             "file (same model, precision and GPUs; interleaved-1f1b's with the same chunks), "
                             "where --cut and --interleaved-cut are not given")
    parser.add_argument("--dist-timeout", type=bc.positive_int, default=120,
                        help="seconds a rank waits in a collective before failing; default 120")
    args = parser.parse_args(argv)
    bc.finish_args(args)
    if bc.is_llama(args.model):  # the stages below are the ResNet's and the GPT's
        raise bc.UsageError(f"--model={args.model}: pipelining.py cuts the ResNet and GPT models only")
    if args.split_sizes is None:
        args.split_sizes = [4] if bc.is_language_model(args.model) else [20]
    return args


def entry_fields(entry: dict) -> dict:
    """A parbench entry's fields (schema 1.4.0), or in older files its name's parts
    (train/<strategy>/<model>/key:value/...)."""
    if isinstance(entry.get("fields"), dict):
        return entry["fields"]
    parts = str(entry.get("run_name", "")).split("/")
    fields = {"strategy": parts[1], "model": parts[2]} if len(parts) > 2 else {}
    fields.update(part.split(":", 1) for part in parts[3:] if ":" in part)
    return fields


def parbench_cut(path: Path, model: str, precision: str, gpus: int, interleaved: bool, chunks: int):
    """The label's cut of the first pipeline case in parbench's JSON at `path` of this model,
    precision and GPU count that ran (interleaved-1f1b's with `chunks`, else any other schedule),
    or None."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise bc.UsageError(f"--cuts-from={path}: cannot read: {error}") from None
    for entry in document.get("benchmarks", []) if isinstance(document, dict) else []:
        fields = {key: str(value) for key, value in entry_fields(entry).items()}
        if (entry.get("error_occurred") or entry.get("run_type") != "iteration" or fields.get("strategy") != "pipeline"
                or fields.get("model") != model or fields.get("precision") != precision
                or fields.get("gpus") != str(gpus) or (fields.get("schedule") == "interleaved-1f1b") != interleaved
                or (interleaved and fields.get("chunks") != str(chunks))):
            continue
        facts = dict(part.split("=", 1) for part in str(entry.get("label", "")).split(";") if "=" in part)
        if facts.get("cut"):
            return facts["cut"]
    return None


def cut_for(args, parts: int, interleaved: bool, precision: str | None = None) -> tuple[list[list[str]], str]:
    """The cut into `parts` and where it came from: the flag, parbench's JSON, or the default."""
    spec, source = (args.interleaved_cut if interleaved else args.cut), "flag"
    if not spec and args.cuts_from and precision:
        spec, source = parbench_cut(args.cuts_from, args.model, precision, parts // (args.chunks if interleaved else 1),
                                    interleaved, args.chunks), "parbench"
    if not spec:
        spec, source = default_cut(args.model, parts), "default"
    try:
        return parse_cut(spec, stage_names(args.model), parts, stage_groups(args.model)), source
    except ValueError as error:
        raise bc.UsageError(f"{error} (from {source})") from None


def describe(args, world, batch, precision, split, schedule):
    fields = {"model": args.model, "batch": batch, **bc.sample_field(args), "precision": precision,
              "data": "device", "gpus": world, "split": split, "schedule": schedule}
    name = f"pytorch/pipelining/{args.model}/batch:{batch}/precision:{precision}/gpus:{world}/split:{split}/schedule:{schedule}"
    if schedule == "interleaved-1f1b":
        fields["chunks"] = args.chunks
        name += f"/chunks:{args.chunks}"
    fields.update(lanes=1, graph="off")
    return name, fields


def run_case(args, rank, world, device, batch, precision, split, schedule):
    name, fields = describe(args, world, batch, precision, split, schedule)

    def skipped(reason):
        return bc.result(name, BASELINE, "pipeline", schedule, fields, "event", None, batch, args,
                         error=f"skipped: {reason}")

    if batch % split:
        return skipped(f"split {split} does not divide batch {batch}: pipelining's micro-batches would differ "
                       "from parbench's")
    micro_batches = batch // split
    interleaved = schedule == "interleaved-1f1b"
    chunks = args.chunks if interleaved else 1
    parts = world * chunks
    cut, cut_source = cut_for(args, parts, interleaved, precision)
    bc.reset_peak_memory([device])
    torch.manual_seed(0)  # every rank builds the same model and keeps its own parts
    with device:
        model = make_model(args.model)
    model.train()
    bc.prepare_for_precision(model, precision)
    modules = cut_modules(args.model, model, cut)
    mine = list(range(rank, parts, world))  # stage s on rank s mod world, as parbench places chunks
    stages = []
    for index in mine:
        wrapped = bc.Autocast(modules[index], bc.autocast_dtype(precision), device.type)
        stages.append(PipelineStage(wrapped, index, parts, device))
    parameters = [p for index in mine for p in modules[index].parameters()]
    del model, modules
    bc.free_cuda_memory()
    try:
        if interleaved:
            pipeline = ScheduleInterleaved1F1B(stages, n_microbatches=micro_batches, loss_fn=bc.compute_loss)
        else:
            pipeline = SCHEDULES[schedule](stages[0], n_microbatches=micro_batches, loss_fn=bc.compute_loss)
    except ValueError as error:  # e.g. 1F1B with fewer micro-batches than stages: every rank says so alike
        return skipped(bc.first_line(error))
    optimizer = bc.make_sgd(parameters)
    torch.manual_seed(1000)
    inputs, targets = bc.make_batch(args, batch, precision, device, device)
    first, last = 0 in mine, parts - 1 in mine

    def step():
        optimizer.zero_grad(set_to_none=True)
        step_args = (inputs,) if first else ()
        # return_outputs=False: the last stage need not concatenate the micro-batches' outputs
        # (a GPT's logits), which parbench does not do either.
        if last:
            pipeline.step(*step_args, target=targets, losses=[], return_outputs=False)
        else:
            pipeline.step(*step_args, return_outputs=False)
        optimizer.step()

    for _ in range(args.warmup):
        step()
    bc.synchronize([device])
    timer = bc.StepTimer([device], "event")
    start = line_up(device)
    times = []
    for _ in range(args.repetitions):
        steps = []
        for _ in range(args.steps):
            dist.barrier()
            steps.append(timer.time(step, start))
        times.append(steps)
    gathered = gather_times(times, bc.peak_memory_gib([device]))
    repetitions, rank_spread, rank_medians = combine(gathered)
    peaks = {str(r): next(iter(g["peak"].values())) for r, g in enumerate(gathered) if g["peak"]}
    del pipeline, stages, optimizer, parameters
    bc.free_cuda_memory()
    return bc.result(name, BASELINE, "pipeline", schedule, fields, "event", repetitions, batch, args,
                     devices=[device], flops=bc.forward_flops_per_sample(args), gpus_used=world, peak_mem=peaks,
                     details={"backend": dist.get_backend(), "micro_batches": micro_batches,
                              "cut": format_cut(cut, stage_groups(args.model)), "cut_source": cut_source,
                              "step_ms_rank_spread": rank_spread,
                              "rank_median_step_ms": rank_medians, "resnet_source": RESNET_SOURCE})


def main(argv) -> int:
    args = parse(argv)
    rank, world, device = init_distributed(args)
    for interleaved in (False, True):  # bad cuts fail here, on every rank alike, before any case runs
        if not interleaved or "interleaved-1f1b" in args.schedules:
            for precision in args.precision:
                cut_for(args, world * (args.chunks if interleaved else 1), interleaved, precision)
    ctx = bc.context(args.device, "event", world)
    results, status = [], 0
    try:
        for batch in args.batch:
            for precision in args.precision:
                for split in args.split_sizes:
                    for schedule in args.schedules:
                        try:
                            results.append(run_case(args, rank, world, device, batch, precision, split, schedule))
                        except Exception as error:
                            # A rank that fails leaves the others in a collective: record it, end the run.
                            name, fields = describe(args, world, batch, precision, split, schedule)
                            results.append(bc.result(name, BASELINE, "pipeline", schedule, fields, "event", None,
                                                     batch, args, error=f"rank {rank}: {bc.first_line(error)}"))
                            status = 1
                        if rank == 0:
                            bc.report(results[-1])
                            bc.write_document(args.out, ctx, results)
                        if status:
                            print(f"pipelining.py: rank {rank}: {results[-1]['error']}", file=sys.stderr)
                            return status
    finally:
        if status == 0:
            dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(bc.main_wrapper(main))
