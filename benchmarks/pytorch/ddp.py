"""torch.nn.parallel.DistributedDataParallel under torchrun: one process per GPU, gradients
all-reduced in buckets during backward (NCCL; gloo on the CPU). parbench's ddp defaults: 25 MiB
buckets, overlap on, weak scaling (--batch per rank). Timing as parbench's ddp
(benchmarks/launch/rank_results.cpp): every rank times each step after a barrier and a one-element
all-reduce that lines the ranks' streams up; a step's time is the slowest rank's, a repetition's
the mean of its steps, the result the median repetition. items/s counts the global batch.

  torchrun --standalone --nproc-per-node=2 benchmarks/pytorch/ddp.py --out ddp.json
"""
from __future__ import annotations

import datetime
import os
import statistics
import sys

import torch
import torch.distributed as dist

import baseline_common as bc
from baseline_models import RESNET_SOURCE, make_model


def parse(argv):
    parser = bc.common_parser(__doc__.split("\n")[0], model_default="resnet50")
    parser.add_argument("--bucket-mib", type=float, default=25.0, help="DDP's bucket_cap_mb; default 25")
    parser.add_argument("--scaling", choices=["weak", "strong"], default="weak",
                        help="weak: --batch per rank; strong: --batch global, split over the ranks")
    parser.add_argument("--dist-timeout", type=bc.positive_int, default=120,
                        help="seconds a rank waits in a collective before failing; default 120")
    args = parser.parse_args(argv)
    bc.finish_args(args)
    return args


def distributed_env():
    """(rank, world size, local rank) from torchrun's variables; UsageError without them."""
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    except (KeyError, ValueError):
        raise bc.UsageError("run under torchrun (RANK, WORLD_SIZE and LOCAL_RANK are not set)") from None


def init_distributed(args):
    rank, world, local_rank = distributed_env()
    if args.device == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise bc.UsageError(f"local rank {local_rank} has no GPU ({torch.cuda.device_count()} visible)")
        device = torch.device(f"cuda:{local_rank}")
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, timeout=datetime.timedelta(seconds=args.dist_timeout))
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.dist_timeout))
    return rank, world, device


def line_up(device):
    """Ranks leave a barrier up to a round trip apart: an all-reduce on the stream makes every
    rank's clock start behind the same point (parbench's line_up_streams)."""
    token = torch.ones(1, device=device)

    def run():
        dist.all_reduce(token)
    return run


def gather_times(times: list[list[float]], peak: dict):
    """Every rank's per-step times and peak memory, on every rank."""
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {"times": times, "peak": peak})
    return gathered


def combine(gathered) -> tuple[list[float], float, list[float]]:
    """parbench's gather_run: per step the slowest rank; a repetition the mean of its steps.
    Returns the repetitions, the median over repetitions of the ranks' spread ((max - min) /
    median of the ranks' medians), and each rank's median step time."""
    repetitions, spreads = [], []
    for r in range(len(gathered[0]["times"])):
        per_rank = [rank["times"][r] for rank in gathered]
        slowest = [max(step) for step in zip(*per_rank)]
        repetitions.append(statistics.fmean(slowest))
        medians = [statistics.median(steps) for steps in per_rank]
        middle = statistics.median(medians)
        spreads.append((max(medians) - min(medians)) / middle if middle > 0 else 0.0)
    rank_medians = [statistics.median([t for rep in rank["times"] for t in rep]) for rank in gathered]
    return repetitions, statistics.median(spreads), rank_medians


BASELINE = "torch.nn.parallel.DistributedDataParallel"


def describe(args, world, batch, precision):
    """The case's name, parbench's fields, and its per-rank and global batch."""
    per_rank = batch if args.scaling == "weak" else batch // world
    fields = {"model": args.model, "batch": batch, **bc.sample_field(args), "precision": precision,
              "data": "device", "gpus": world, "bucket_mib": bc_number(args.bucket_mib), "overlap": "on",
              "scaling": args.scaling, "graph": "off"}
    name = (f"pytorch/ddp/{args.model}/batch:{batch}/precision:{precision}/gpus:{world}/"
            f"bucket_mib:{fields['bucket_mib']}/scaling:{args.scaling}")
    return name, fields, per_rank, per_rank * world


def run_case(args, world, device, batch, precision):
    name, fields, per_rank, global_batch = describe(args, world, batch, precision)
    if args.scaling == "strong" and batch % world:
        return bc.result(name, BASELINE, "ddp", "eager", fields, "event",
                         None, global_batch, args, error=f"skipped: strong scaling needs a batch divisible by {world} ranks")
    bc.reset_peak_memory([device])
    torch.manual_seed(0)  # the same weights on every rank (DDP broadcasts rank 0's anyway)
    with device:
        model = make_model(args.model)
    model.train()
    bc.prepare_for_precision(model, precision)
    wrapped = bc.Autocast(model, bc.autocast_dtype(precision), device.type)
    ddp = torch.nn.parallel.DistributedDataParallel(
        wrapped, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=args.bucket_mib)
    optimizer = bc.make_sgd(ddp.parameters())
    torch.manual_seed(1000 + dist.get_rank())  # each rank its own data
    inputs, targets = bc.make_batch(args, per_rank, precision, device, device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        bc.compute_loss(ddp(inputs), targets).backward()
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
    peak = bc.peak_memory_gib([device])
    gathered = gather_times(times, peak)
    repetitions, rank_spread, rank_medians = combine(gathered)
    peaks = {str(r): next(iter(g["peak"].values())) for r, g in enumerate(gathered) if g["peak"]}
    del ddp, model, optimizer
    bc.free_cuda_memory()
    return bc.result(name, BASELINE, "ddp", "eager", fields, "event",
                     repetitions, global_batch, args, devices=[device], flops=bc.forward_flops_per_sample(args),
                     gpus_used=world, peak_mem=peaks,
                     details={"backend": dist.get_backend(), "step_ms_rank_spread": rank_spread,
                              "rank_median_step_ms": rank_medians, "per_rank_batch": per_rank,
                              "resnet_source": RESNET_SOURCE})


def bc_number(value: float):
    """25.0 -> 25, as parbench's fields write a whole number."""
    return int(value) if float(value).is_integer() else value


def main(argv) -> int:
    args = parse(argv)
    rank, world, device = init_distributed(args)
    results, status = [], 0
    ctx = bc.context(args.device, "event", world)
    try:
        for batch in args.batch:
            for precision in args.precision:
                try:
                    results.append(run_case(args, world, device, batch, precision))
                except Exception as error:
                    # A rank that fails leaves the others in a collective: record it, end the run.
                    name, fields, _, global_batch = describe(args, world, batch, precision)
                    results.append(bc.result(name, BASELINE, "ddp", "eager", fields, "event", None, global_batch,
                                             args, error=f"rank {rank}: {bc.first_line(error)}"))
                    status = 1
                if rank == 0:
                    bc.report(results[-1])
                    bc.write_document(args.out, ctx, results)
                if status:
                    print(f"ddp.py: rank {rank}: {results[-1]['error']}", file=sys.stderr)
                    return status
    finally:
        if status == 0:
            dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(bc.main_wrapper(main))
