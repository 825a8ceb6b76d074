"""PyTorch's "Single-Machine Model Parallel Best Practices" tutorial, its own code: ResNet-50 on one
GPU, ModelParallelResNet50 (stem..layer2 on GPU 0, layer3..fc on GPU 1) and
PipelineParallelResNet50 (the batch split into micro-batches of split_size, GPU 1's work on one
overlapping GPU 0's on the next), trained by the tutorial's step (MSE on one-hot labels, SGD lr
1e-3).

--method=event (default) times them as parbench's default preset does: data made once on the
device, 5 warm-up steps, each step timed by CUDA events after a device synchronisation.
--method=tutorial times them as the tutorial did and as parbench's --preset=tutorial does: a
batch made on the CPU every step and copied, 3 steps per timing, 10 timings, the host clock with
no synchronisation, no warm-up (--warmup, --steps and --repetitions are then ignored).

  python3 benchmarks/pytorch/tutorial.py --out tutorial.json --split-sizes 20
"""
from __future__ import annotations

import sys
import time

import torch
from torch import nn

import baseline_common as bc
from baseline_models import RESNET_SOURCE, Bottleneck, ResNet, make_resnet

VARIANTS = ["single", "model_parallel", "pipeline"]


class ModelParallelResNet50(ResNet):
    """The tutorial's class; its 'cuda:0' and 'cuda:1' are parameters here so it also runs on the CPU."""

    def __init__(self, dev0, dev1, layers, num_classes):
        super().__init__(Bottleneck, layers, num_classes=num_classes)
        self.dev0, self.dev1 = dev0, dev1
        self.seq1 = nn.Sequential(
            self.conv1, self.bn1, self.relu, self.maxpool, self.layer1, self.layer2
        ).to(dev0)
        self.seq2 = nn.Sequential(self.layer3, self.layer4, self.avgpool).to(dev1)
        self.fc.to(dev1)

    def forward(self, x):
        x = self.seq2(self.seq1(x).to(self.dev1))
        return self.fc(x.view(x.size(0), -1))


class PipelineParallelResNet50(ModelParallelResNet50):
    """The tutorial's class, its forward verbatim."""

    def __init__(self, split_size, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.split_size = split_size

    def forward(self, x):
        splits = iter(x.split(self.split_size, dim=0))
        s_next = next(splits)
        s_prev = self.seq1(s_next).to(self.dev1)
        ret = []

        for s_next in splits:
            # A. s_prev runs on dev1
            s_prev = self.seq2(s_prev)
            ret.append(self.fc(s_prev.view(s_prev.size(0), -1)))

            # B. s_next runs on dev0, which can run concurrently with A
            s_prev = self.seq1(s_next).to(self.dev1)

        s_prev = self.seq2(s_prev)
        ret.append(self.fc(s_prev.view(s_prev.size(0), -1)))

        return torch.cat(ret)


def parse(argv):
    parser = bc.common_parser(__doc__.split("\n")[0], model_default="resnet50")
    parser.add_argument("--variants", type=bc.choice_list(VARIANTS), default=VARIANTS,
                        help="single,model_parallel,pipeline; default all")
    parser.add_argument("--split-sizes", type=bc.int_list, default=[20],
                        help="PipelineParallelResNet50's split_size list; default 20")
    parser.add_argument("--method", choices=["event", "tutorial"], default="event",
                        help="event: parbench's default timing; tutorial: the tutorial's (see above)")
    args = parser.parse_args(argv)
    bc.finish_args(args)
    if bc.is_language_model(args.model):
        raise bc.UsageError("the tutorial trains ResNets only (--model=resnet50 or resnet-tiny)")
    if args.method == "tutorial":
        args.warmup, args.steps, args.repetitions = 0, 3, 10
    return args


def devices_for(args):
    if args.device == "cpu":
        return torch.device("cpu"), torch.device("cpu")
    if torch.cuda.device_count() < 2:
        return torch.device("cuda:0"), None
    return torch.device("cuda:0"), torch.device("cuda:1")


def build(args, variant, split, dev0, dev1):
    layers = [3, 4, 6, 3] if args.model == "resnet50" else [1, 1, 1, 1]
    classes = bc.num_classes(args.model)
    if variant == "single":
        return make_resnet(args.model).to(dev0), dev0
    if variant == "model_parallel":
        return ModelParallelResNet50(dev0, dev1, layers, classes), dev1
    return PipelineParallelResNet50(split, dev0, dev1, layers, classes), dev1


def run_case(args, batch, precision, variant, split, dev0, dev1) -> dict:
    data = "host" if args.method == "tutorial" else "device"
    timer = "host" if args.method == "tutorial" else "event"
    variant_name = "tutorial timing" if args.method == "tutorial" else "event"
    fields = {"model": args.model, "batch": batch, "image": args.image, "precision": precision, "data": data}
    name = f"pytorch/tutorial/{variant}/{args.model}/batch:{batch}/precision:{precision}/data:{data}"
    if variant != "single":
        fields["gpus"] = 2
    if variant == "pipeline":
        fields.update(split=split, schedule="tutorial", lanes=1)
        name += f"/split:{split}"
    fields["graph"] = "off"
    baseline = {"single": "tutorial resnet50", "model_parallel": "tutorial ModelParallelResNet50",
                "pipeline": "tutorial PipelineParallelResNet50"}[variant]
    if variant != "single" and dev1 is None:
        return bc.result(name, baseline, variant, variant_name, fields, timer, None, batch, args,
                         error="skipped: needs 2 GPUs, 1 visible")
    devices = [dev0] if variant == "single" else [dev0, dev1]
    try:
        bc.reset_peak_memory(devices)
        torch.manual_seed(0)
        model, output_device = build(args, variant, split, dev0, dev1)
        model.train(True)
        bc.prepare_for_precision(model, precision)
        forward = bc.Autocast(model, bc.autocast_dtype(precision), dev0.type)
        optimizer = bc.make_sgd(model.parameters())
        if args.method == "tutorial":
            # The tutorial's train(): labels from fixed class indices, a new CPU batch every step.
            one_hot_indices = torch.LongTensor(batch).random_(0, bc.num_classes(args.model)).view(batch, 1)

            def step():
                inputs = torch.randn(batch, 3, args.image, args.image)
                labels = torch.zeros(batch, bc.num_classes(args.model)).scatter_(1, one_hot_indices, 1)
                optimizer.zero_grad()
                inputs = inputs.to(dev0)
                if precision == "bf16":
                    inputs = inputs.contiguous(memory_format=torch.channels_last)
                outputs = forward(inputs)
                labels = labels.to(outputs.device)
                bc.compute_loss(outputs, labels).backward()
                optimizer.step()

            # timeit.repeat(number=1, repeat=10) of train(model), 3 batches each; no warm-up.
            per_repetition = []
            for _ in range(args.repetitions):
                began = time.perf_counter()
                for _ in range(args.steps):
                    step()
                per_repetition.append((time.perf_counter() - began) * 1e3 / args.steps)
            bc.synchronize(devices)
        else:
            inputs, targets = bc.make_batch(args, batch, precision, dev0, output_device)

            def step():
                optimizer.zero_grad()
                bc.compute_loss(forward(inputs), targets).backward()
                optimizer.step()

            per_repetition = bc.repetition_means(
                bc.time_repetitions(step, devices, args.warmup, args.repetitions, args.steps, "event"))
        peak = bc.peak_memory_gib(devices)
        return bc.result(name, baseline, variant, variant_name, fields, timer, per_repetition, batch, args,
                         devices=devices, flops=bc.forward_flops_per_sample(args),
                         gpus_used=len({str(d) for d in devices}), peak_mem=peak,
                         details={"resnet_source": RESNET_SOURCE, "cut": "stem,layer1,layer2|layer3,layer4,head"
                                  if variant != "single" else ""})
    except Exception as error:
        return bc.result(name, baseline, variant, variant_name, fields, timer, None, batch, args,
                         error=bc.first_line(error))
    finally:
        bc.free_cuda_memory()


def main(argv) -> int:
    args = parse(argv)
    dev0, dev1 = devices_for(args)
    results = []
    ctx = bc.context(args.device, "host" if args.method == "tutorial" else "event")
    for batch in args.batch:
        for precision in args.precision:
            for variant in args.variants:
                for split in (args.split_sizes if variant == "pipeline" else [None]):
                    bc.record(args.out, ctx, results, run_case(args, batch, precision, variant, split, dev0, dev1))
    return bc.exit_status(results)


if __name__ == "__main__":
    sys.exit(bc.main_wrapper(main))
