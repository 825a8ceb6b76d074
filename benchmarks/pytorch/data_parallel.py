"""torch.nn.DataParallel: one process, the model on GPU 0 replicated onto every GPU each step, the
global batch scattered, the outputs gathered on GPU 0 where the loss is taken, gradients reduced
onto GPU 0's model, SGD there. parbench's data_parallel (replicate:broadcast) is modelled on it.
The step, data and timing are parbench's (docs/METRICS.md); --batch is the global batch.

  python3 benchmarks/pytorch/data_parallel.py --out data_parallel.json --batch 120,240
"""
from __future__ import annotations

import sys

import torch

import baseline_common as bc
from baseline_models import RESNET_SOURCE, make_model


def parse(argv):
    parser = bc.common_parser(__doc__.split("\n")[0], model_default="resnet50")
    parser.add_argument("--gpus", type=bc.positive_int, default=2, help="replicas (GPUs 0..N-1); default 2")
    args = parser.parse_args(argv)
    bc.finish_args(args)
    return args


def run_case(args, batch: int, precision: str) -> dict:
    fields = {"model": args.model, "batch": batch, **bc.sample_field(args), "precision": precision,
              "data": "device", "gpus": args.gpus, "replicate": "broadcast", "graph": "off"}
    name = f"pytorch/data_parallel/{args.model}/batch:{batch}/precision:{precision}/gpus:{args.gpus}"

    def failed(message):
        return bc.result(name, "torch.nn.DataParallel", "data_parallel", "eager", fields, "event", None, batch, args,
                         error=message)

    if args.device != "cuda":
        return failed("skipped: nn.DataParallel needs GPUs (on the CPU it runs the module unchanged)")
    if torch.cuda.device_count() < args.gpus:
        return failed(f"skipped: needs {args.gpus} GPUs, {torch.cuda.device_count()} visible")
    if batch % args.gpus:
        return failed(f"skipped: a global batch of {batch} does not divide over {args.gpus} GPUs")
    devices = [torch.device(f"cuda:{i}") for i in range(args.gpus)]
    try:
        bc.reset_peak_memory(devices)
        torch.manual_seed(0)
        with devices[0]:
            model = make_model(args.model)
        model.train()
        bc.prepare_for_precision(model, precision)
        # Autocast inside the module: DataParallel runs each replica's forward on a thread of its own.
        parallel = torch.nn.DataParallel(bc.Autocast(model, bc.autocast_dtype(precision), "cuda"),
                                         device_ids=list(range(args.gpus)), output_device=0)
        optimizer = bc.make_sgd(model.parameters())
        inputs, targets = bc.make_batch(args, batch, precision, devices[0], devices[0])

        def step():
            optimizer.zero_grad(set_to_none=True)
            bc.compute_loss(parallel(inputs), targets).backward()
            optimizer.step()

        times = bc.time_repetitions(step, devices, args.warmup, args.repetitions, args.steps, "event")
        return bc.result(name, "torch.nn.DataParallel", "data_parallel", "eager", fields, "event",
                         bc.repetition_means(times), batch, args, devices=devices,
                         flops=bc.forward_flops_per_sample(args), gpus_used=args.gpus,
                         peak_mem=bc.peak_memory_gib(devices), details={"resnet_source": RESNET_SOURCE})
    except Exception as error:
        return failed(bc.first_line(error))
    finally:
        bc.free_cuda_memory()


def main(argv) -> int:
    args = parse(argv)
    results = []
    context = bc.context(args.device, "event")
    for batch in args.batch:
        for precision in args.precision:
            bc.record(args.out, context, results, run_case(args, batch, precision))
    return bc.exit_status(results)


if __name__ == "__main__":
    sys.exit(bc.main_wrapper(main))
