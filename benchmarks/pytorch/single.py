"""The whole model on one GPU, as a PyTorch user writes it: eager, one training step captured in a
CUDA graph and replayed (parbench's --cuda-graph=on), and torch.compile'd. The step is parbench's
(strategies/single.cpp): zero the gradients, forward under autocast (bf16), fp32 loss, backward,
SGD lr 1e-3; random data made once on the device; the timing rule of docs/METRICS.md.

  python3 benchmarks/pytorch/single.py --out single.json --model gpt2-medium --variants eager,graph
"""
from __future__ import annotations

import sys
import time

import torch

import baseline_common as bc
from baseline_models import RESNET_SOURCE, make_model

VARIANTS = ["eager", "graph", "compile"]


def parse(argv):
    parser = bc.common_parser(__doc__.split("\n")[0], model_default="gpt2-medium")
    parser.add_argument("--variants", type=bc.choice_list(VARIANTS), default=["eager", "graph"],
                        help="eager,graph,compile; default eager,graph (compile takes a minute or more "
                             "for gpt2-medium)")
    args = parser.parse_args(argv)
    bc.finish_args(args)
    return args


def capture_step(step, device, autocast_module):
    """The whole step (zero_grad, forward, loss, backward, SGD) in one CUDA graph, as PyTorch's
    documentation captures a whole network: three steps on a side stream first, so that lazy
    state (cuBLAS workspaces, the optimizer's) exists before capture. Returns the replay."""
    autocast_module.cache = False
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def run_case(args, batch: int, precision: str, variant: str) -> dict:
    device = torch.device("cuda:0") if args.device == "cuda" else torch.device("cpu")
    fields = {"model": args.model, "batch": batch, **bc.sample_field(args), "precision": precision,
              "data": "device", "graph": "on" if variant == "graph" else "off"}
    baseline = {"eager": "eager", "graph": "torch.cuda.graph", "compile": "torch.compile"}[variant]
    name = f"pytorch/single/{args.model}/batch:{batch}/precision:{precision}/{variant}"

    def failed(message):
        return bc.result(name, baseline, "single", variant, fields, "event", None, batch, args, error=message)

    if variant == "graph" and device.type != "cuda":
        return failed("skipped: CUDA graphs need a GPU")
    details = {"resnet_source": RESNET_SOURCE} if not bc.is_language_model(args.model) else {}
    try:
        bc.reset_peak_memory([device])
        torch.manual_seed(0)
        with device:
            model = make_model(args.model)
        model.train()
        bc.prepare_for_precision(model, precision)
        forward = bc.Autocast(model, bc.autocast_dtype(precision), device.type)
        optimizer = bc.make_sgd(model.parameters())
        inputs, targets = bc.make_batch(args, batch, precision, device, device)
        if variant == "compile":
            forward = torch.compile(forward)

        def step():
            optimizer.zero_grad(set_to_none=True)
            loss = bc.compute_loss(forward(inputs), targets)
            loss.backward()
            optimizer.step()

        if variant == "compile":
            began = time.perf_counter()
            step()
            bc.synchronize([device])
            details["compile_s"] = time.perf_counter() - began  # the first step: tracing and compiling
        warmup = args.warmup
        if variant == "graph":
            for _ in range(args.warmup):
                step()
            step = capture_step(step, device, forward)
            warmup = 1
        times = bc.time_repetitions(step, [device], warmup, args.repetitions, args.steps, "event")
        peak = bc.peak_memory_gib([device])
        return bc.result(name, baseline, "single", variant, fields, "event", bc.repetition_means(times), batch, args,
                         devices=[device], flops=bc.forward_flops_per_sample(args), peak_mem=peak, details=details)
    except Exception as error:  # out of memory, a capture that fails: recorded, the next case runs
        return failed(bc.first_line(error))
    finally:
        bc.free_cuda_memory()


def main(argv) -> int:
    args = parse(argv)
    results = []
    context = bc.context(args.device, "event")
    for batch in args.batch:
        for precision in args.precision:
            for variant in args.variants:
                bc.record(args.out, context, results, run_case(args, batch, precision, variant))
    return bc.exit_status(results)


if __name__ == "__main__":
    sys.exit(bc.main_wrapper(main))
