"""What every PyTorch baseline shares: the command line, the training step's parts as parbench
defines them (strategies/training.cpp), the timing rule (docs/METRICS.md, "Timing"), MFU
(benchmarks/measure/mfu.cpp) and the JSON the report reads (docs/JSON.md, "PyTorch baselines").

Each baseline script imports this module from its own folder; nothing here needs a GPU.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

SCHEMA_VERSION = "1.1.0"  # pytorch_baseline_schema; semver with parbench_json_schema's policy
LEARNING_RATE = 1e-3  # parbench's RunConfig::learning_rate
HERE = Path(__file__).resolve().parent


class UsageError(Exception):
    """Bad input: the script prints one line and exits 2."""


# --- the command line ---------------------------------------------------------------------

def int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' needs positive integers")
    return values


def choice_list(choices):
    def parse(text: str) -> list[str]:
        values = [part for part in text.split(",") if part]
        bad = [value for value in values if value not in choices]
        if not values or bad:
            raise argparse.ArgumentTypeError(f"'{text}': each of {', '.join(choices)}")
        return values
    return parse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"'{text}' must be at least 1")
    return value


def common_parser(description: str, model_default: str = "resnet50") -> argparse.ArgumentParser:
    """The flags every baseline takes. Defaults are parbench's default preset, trimmed to the
    driver's budget: 5 warm-up steps, 5 repetitions of 10 timed steps."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", required=True, type=Path, help="JSON file to write")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cuda (the measurement) or cpu (tiny shapes, to exercise the code)")
    parser.add_argument("--model", default=model_default, help="resnet50, resnet-tiny (tests), gpt2-small, "
                        "gpt2-medium, gpt2-large, gpt2-xl, gpt-2.7b, gpt-6.7b, tinygpt (tests), llama3-1b, "
                        "llama3-8b or tinyllama (tests)")
    parser.add_argument("--batch", type=int_list, default=None,
                        help="images (sequences) per step; default 120 (language models 16)")
    parser.add_argument("--image", type=positive_int, default=128, help="image side; default 128")
    parser.add_argument("--seq", type=positive_int, default=1024, help="language models: tokens per sequence")
    parser.add_argument("--precision", type=choice_list(["fp32", "bf16"]), default=None,
                        help="fp32,bf16 list; default fp32 (language models bf16)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before timing; default 5")
    parser.add_argument("--steps", type=positive_int, default=10, help="timed steps per repetition; default 10")
    parser.add_argument("--repetitions", type=positive_int, default=5, help="repetitions; default 5")
    return parser


def finish_args(args) -> None:
    """Defaults that depend on the model, and checks argparse cannot make alone."""
    language = is_language_model(args.model)
    if args.model not in RESNET_LAYERS and not language:
        raise UsageError(f"--model={args.model}: unknown "
                         f"(resnet50, resnet-tiny, {', '.join(GPT_CONFIGS)}, {', '.join(LLAMA_CONFIGS)})")
    if args.batch is None:
        args.batch = [16] if language else [120]
    if args.precision is None:
        args.precision = ["bf16"] if language else ["fp32"]
    if args.warmup < 0:
        raise UsageError("--warmup must be 0 or more")
    if language and args.seq > language_config(args.model)["context"]:
        raise UsageError(f"--seq={args.seq} is longer than {args.model}'s context")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device=cuda but no GPU is visible (use --device=cpu for the CPU mode)")


def main_wrapper(main):
    """Runs main(argv); bad input is one line on stderr and exit status 2."""
    try:
        return main(sys.argv[1:])
    except UsageError as error:
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
        return 2


# --- models -------------------------------------------------------------------------------
# ResNet: torchvision's resnet50 where torchvision is installed (the GPU machines), else the same
# architecture from baseline_models.py; resnet-tiny is its Bottleneck with one block per layer.
RESNET_LAYERS = {"resnet50": [3, 4, 6, 3], "resnet-tiny": [1, 1, 1, 1]}
# models/gpt.cpp's table: layers, width, heads, vocabulary (50257 padded to 50304), context.
GPT_CONFIGS = {
    "gpt2-small": dict(layers=12, width=768, heads=12, vocabulary=50304, context=1024),
    "gpt2-medium": dict(layers=24, width=1024, heads=16, vocabulary=50304, context=1024),
    "gpt2-large": dict(layers=36, width=1280, heads=20, vocabulary=50304, context=1024),
    "gpt2-xl": dict(layers=48, width=1600, heads=25, vocabulary=50304, context=1024),
    "gpt-2.7b": dict(layers=32, width=2560, heads=32, vocabulary=50304, context=2048),
    "gpt-6.7b": dict(layers=32, width=4096, heads=32, vocabulary=50304, context=2048),
    "tinygpt": dict(layers=2, width=32, heads=4, vocabulary=96, context=1024),
}
# models/llama.cpp's table: width, blocks, heads, kv heads, feed-forward, vocabulary, context,
# whether the head is the embedding's weight, and Llama 3.1's rotary scaling (factor, original
# context; low and high frequency factors 1 and 4). Theta 500000, RMSNorm eps 1e-5.
LLAMA_CONFIGS = {
    "llama3-1b": dict(width=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocabulary=128256, context=131072,
                      tied=True, rope_factor=32.0, rope_original_context=8192),
    "llama3-3b": dict(width=3072, layers=28, heads=24, kv_heads=8, ffn=8192, vocabulary=128256, context=131072,
                      tied=True, rope_factor=32.0, rope_original_context=8192),
    "llama3-8b": dict(width=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocabulary=128256, context=131072,
                      tied=False, rope_factor=8.0, rope_original_context=8192),
    # For CPU tests: 2 query heads per kv head; an original context of 256 puts one rotary
    # frequency in each of the scaling's three bands.
    "tinyllama": dict(width=64, layers=2, heads=8, kv_heads=4, ffn=128, vocabulary=128, context=2048,
                      tied=False, rope_factor=8.0, rope_original_context=256),
}
LLAMA_ROPE_THETA = 500000.0
LLAMA_NORM_EPS = 1e-5


def is_language_model(model: str) -> bool:
    return model in GPT_CONFIGS or model in LLAMA_CONFIGS


def is_llama(model: str) -> bool:
    return model in LLAMA_CONFIGS


def language_config(model: str) -> dict:
    return LLAMA_CONFIGS[model] if is_llama(model) else GPT_CONFIGS[model]


def num_classes(model: str) -> int:
    return 10 if model == "resnet-tiny" else 1000


def sample_field(args) -> dict:
    """The name part parbench writes for the sample: image side or tokens per sequence."""
    return {"seq": args.seq} if is_language_model(args.model) else {"image": args.image}


def autocast_dtype(precision: str):
    return torch.bfloat16 if precision == "bf16" else None


class Autocast(torch.nn.Module):
    """Runs `inner` under autocast (bf16), as parbench's AutocastScope does around each forward.
    Inside the module so that DataParallel's replica threads and a pipeline stage get it too
    (autocast state is thread-local). `cache` off under CUDA-graph capture: every replay must redo
    the casts of the weights it updates (models/autocast_cache.h)."""

    def __init__(self, inner: torch.nn.Module, dtype, device_type: str):
        super().__init__()
        self.inner = inner
        self.dtype = dtype
        self.device_type = device_type
        self.cache = True

    def forward(self, x):
        if self.dtype is None:
            return self.inner(x)
        with torch.autocast(self.device_type, dtype=self.dtype, cache_enabled=self.cache):
            return self.inner(x)


def prepare_for_precision(module: torch.nn.Module, precision: str) -> torch.nn.Module:
    """bf16: channels-last 4-D weights (strategies/training.cpp, prepare_model)."""
    if precision == "bf16":
        module.to(memory_format=torch.channels_last)
    return module


def make_batch(args, batch: int, precision: str, input_device, target_device):
    """Random data as parbench's make_random_batch: images and one-hot labels (MSE), or tokens and
    the same shifted by one (next-token cross-entropy)."""
    if is_language_model(args.model):
        tokens = torch.randint(language_config(args.model)["vocabulary"], (batch, args.seq + 1))
        return tokens[:, :-1].contiguous().to(input_device), tokens[:, 1:].contiguous().to(target_device)
    inputs = torch.randn(batch, 3, args.image, args.image)
    classes = torch.randint(num_classes(args.model), (batch,))
    targets = torch.zeros(batch, num_classes(args.model)).scatter_(1, classes.unsqueeze(1), 1.0)
    inputs = inputs.to(input_device)
    if precision == "bf16":
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    return inputs, targets.to(target_device)


def compute_loss(outputs, targets):
    """parbench's compute_loss: fp32 logits; MSE on one-hot labels, cross-entropy on tokens."""
    logits = outputs.float()
    if logits.dim() == 3:
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    if targets.dtype == torch.long:
        return F.cross_entropy(logits, targets)
    return F.mse_loss(logits, targets)


def make_sgd(parameters):
    return torch.optim.SGD(parameters, lr=LEARNING_RATE)


# --- FLOPs and MFU (docs/METRICS.md) --------------------------------------------------------
# benchmarks/measure/mfu.cpp's datasheet table, most specific first: (name parts, bf16, tf32, fp32, source).
DATASHEET = [
    (("H100", "PCIe"), 756.0, 378.0, 51.0, "NVIDIA H100 Tensor Core GPU datasheet (PCIe)"),
    (("H100", "NVL"), 835.0, 417.5, 60.0, "NVIDIA H100 Tensor Core GPU datasheet (NVL)"),
    (("H100",), 989.4, 494.7, 66.9, "NVIDIA H100 Tensor Core GPU datasheet (SXM)"),
    (("H200", "NVL"), 835.0, 417.5, 60.0, "NVIDIA H200 Tensor Core GPU datasheet (NVL)"),
    (("H200",), 989.4, 494.7, 66.9, "NVIDIA H200 Tensor Core GPU datasheet (SXM)"),
    (("A100",), 312.0, 156.0, 19.5, "NVIDIA A100 Tensor Core GPU datasheet"),
]


def peak_math(precision: str, language_model: bool) -> str:
    if precision == "bf16":
        return "bf16"
    tf32 = torch.backends.cuda.matmul.allow_tf32 if language_model else torch.backends.cudnn.allow_tf32
    return "tf32" if tf32 else "fp32"


def datasheet_peak(gpu_name: str, math_kind: str):
    """(TFLOP/s per GPU, source) or None for a GPU not in the table."""
    for parts, bf16, tf32, fp32, source in DATASHEET:
        if all(part in gpu_name for part in parts):
            return {"bf16": bf16, "tf32": tf32, "fp32": fp32}[math_kind], source
    return None


def gpt_forward_flops_per_sample(model: str, seq: int) -> float:
    """T x (2N + 4 L d T), N without the embeddings (models/gpt.cpp)."""
    config = GPT_CONFIGS[model]
    d, layers = float(config["width"]), float(config["layers"])
    n = layers * (12 * d * d + 13 * d) + 2 * d + config["vocabulary"] * d
    return seq * (2 * n + 4 * layers * d * seq)


def resnet_forward_flops_per_sample(module_factory, image: int) -> float | None:
    """2 x the multiply-accumulates of every convolution and linear layer for one image, counted by
    hooks on a model built on the meta device (no memory, no arithmetic)."""
    macs = [0]

    def count(layer, inputs, output):
        if isinstance(layer, torch.nn.Conv2d):
            kernel = layer.in_channels // layer.groups * layer.kernel_size[0] * layer.kernel_size[1]
            macs[0] += output.numel() * kernel
        elif isinstance(layer, torch.nn.Linear):
            macs[0] += output.numel() * layer.in_features
    try:
        with torch.device("meta"):
            model = module_factory().eval()  # batch-norm in training refuses one value per channel
        for layer in model.modules():
            if isinstance(layer, (torch.nn.Conv2d, torch.nn.Linear)):
                layer.register_forward_hook(count)
        with torch.no_grad():
            model(torch.empty(1, 3, image, image, device="meta"))
    except Exception:  # a meta kernel missing in some torch: no MFU rather than no result
        return None
    return 2.0 * macs[0]


def llama_forward_flops_per_sample(model: str, seq: int) -> float:
    """T x (2N' + 4 L H h T), N' the blocks' matrices and norms, the final norm and the head (tied or
    not: its product runs either way), the token embedding left out (models/llama.cpp)."""
    c = LLAMA_CONFIGS[model]
    d, layers, head = float(c["width"]), float(c["layers"]), float(c["width"] // c["heads"])
    q, kv = c["heads"] * head, c["kv_heads"] * head
    block = d * q + 2 * d * kv + q * d + 3 * d * c["ffn"] + 2 * d
    n = layers * block + d + c["vocabulary"] * d
    return seq * (2 * n + 4 * layers * q * seq)


def forward_flops_per_sample(args) -> float | None:
    if is_llama(args.model):
        return llama_forward_flops_per_sample(args.model, args.seq)
    if is_language_model(args.model):
        return gpt_forward_flops_per_sample(args.model, args.seq)
    from baseline_models import make_resnet
    return resnet_forward_flops_per_sample(lambda: make_resnet(args.model), args.image)


# --- timing (docs/METRICS.md, "Timing") -----------------------------------------------------

def cuda_devices(devices) -> list[torch.device]:
    return sorted({torch.device(d) for d in devices if torch.device(d).type == "cuda"}, key=str)


def synchronize(devices) -> None:
    for device in cuda_devices(devices):
        torch.cuda.synchronize(device)


class StepTimer:
    """parbench's DeviceTimer: "event" waits until every device is idle, records a CUDA event on
    each device's current stream, runs the step and returns the longest start-to-end span over
    the devices; "host" is the host clock with no synchronisation (the tutorial's). On the CPU
    the host clock, which is exact there."""

    def __init__(self, devices, kind: str = "event"):
        self.devices = cuda_devices(devices)
        self.kind = kind
        self.use_events = kind == "event" and bool(self.devices)

    def time(self, step, line_up=None) -> float:
        """Milliseconds of one call of step(). line_up (event timer) runs after the wait and
        before the start events: its work is not timed."""
        if self.use_events:
            synchronize(self.devices)
            if line_up is not None:
                line_up()
            starts, ends = [], []
            for device in self.devices:
                event = torch.cuda.Event(enable_timing=True)
                event.record(torch.cuda.current_stream(device))
                starts.append(event)
            step()
            for device in self.devices:
                event = torch.cuda.Event(enable_timing=True)
                event.record(torch.cuda.current_stream(device))
                ends.append(event)
            for event in ends:
                event.synchronize()
            return max(start.elapsed_time(end) for start, end in zip(starts, ends))
        if self.kind == "event" or not self.devices:
            synchronize(self.devices)  # CPU: nothing; the host clock is exact
        if line_up is not None:
            line_up()
        began = time.perf_counter()
        step()
        return (time.perf_counter() - began) * 1e3


def time_repetitions(step, devices, warmup: int, repetitions: int, steps: int, kind: str = "event",
                     line_up=None) -> list[list[float]]:
    """warmup untimed steps, then `repetitions` lists of `steps` per-step times in ms; each step is
    timed alone, as parbench times each iteration (--steps=1)."""
    for _ in range(warmup):
        step()
    synchronize(devices)
    timer = StepTimer(devices, kind)
    return [[timer.time(step, line_up) for _ in range(steps)] for _ in range(repetitions)]


def reset_peak_memory(devices) -> None:
    if cuda_devices(devices):
        torch.cuda.init()  # the caching allocator answers "Invalid device argument" before CUDA's lazy init
    for device in cuda_devices(devices):
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_gib(devices) -> dict[str, float]:
    return {str(device.index): torch.cuda.max_memory_allocated(device) / 2**30 for device in cuda_devices(devices)}


# --- results and the JSON (docs/JSON.md, "PyTorch baselines") -------------------------------

def git_sha() -> str:
    if os.environ.get("PARBENCH_GIT_SHA"):
        return os.environ["PARBENCH_GIT_SHA"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def context(device: str, timer: str, world_size: int = 1) -> dict:
    gpu_names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    nccl = "none"
    if torch.cuda.is_available():
        try:
            from torch.cuda import nccl as cuda_nccl  # not `import torch.cuda.nccl`: that makes `torch` local here
            version = cuda_nccl.version()
            nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        except Exception:  # a build without NCCL
            nccl = "unknown"
    return {
        "generator": f"benchmarks/pytorch/{Path(sys.argv[0]).name}",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": socket.gethostname(),
        "argv": " ".join(sys.argv),
        "git_sha": git_sha(),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda or "none",
        "cudnn_version": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else "none",
        "nccl_version": nccl,
        "gpu_count": len(gpu_names),
        "gpu_names": gpu_names,
        "devices": device,
        "timer": timer,
        "world_size": world_size,
        "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "environment": {key: value for key, value in sorted(os.environ.items())
                        if key.startswith(("NCCL_", "TORCH_", "NVSHMEM_", "CUDA_"))},
    }


def spread(values: list[float]) -> dict:
    return {"min": min(values), "max": max(values),
            "stddev": statistics.stdev(values) if len(values) > 1 else None}


def result(name: str, baseline: str, strategy: str, variant: str, fields: dict, timer: str,
           per_repetition_ms: list[float] | None, global_batch: int, args, *, devices=(), flops=None,
           gpus_used: int = 1, peak_mem: dict | None = None, error: str | None = None,
           details: dict | None = None) -> dict:
    """One result entry. per_repetition_ms: each repetition's mean step time (None with an error).
    fields: parbench's typed fields of the matching case (docs/JSON.md, "fields")."""
    entry = {"name": name, "baseline": baseline, "strategy": strategy, "variant": variant,
             "fields": {"strategy": strategy, **fields}, "timer": timer,
             "warmup": args.warmup, "repetitions": args.repetitions, "steps_per_repetition": args.steps,
             "step_ms_median": None, "step_ms": None, "step_ms_spread": None,
             "items_per_second": None, "tokens_per_second": None, "tflops": None,
             "mfu": None, "peak_tflops": None, "peak_math": None, "peak_source": None,
             "peak_mem_gib": None, "peak_mem_gib_dev": peak_mem or {},
             "error": error, "details": details or {}}
    if peak_mem:
        entry["peak_mem_gib"] = max(peak_mem.values())
    if error is not None or not per_repetition_ms:
        return entry
    median = statistics.median(per_repetition_ms)
    entry.update(step_ms_median=median, step_ms=per_repetition_ms, step_ms_spread=spread(per_repetition_ms),
                 items_per_second=global_batch * 1e3 / median)
    if is_language_model(args.model):
        entry["tokens_per_second"] = entry["items_per_second"] * args.seq
    if flops:
        entry["tflops"] = 3.0 * flops * entry["items_per_second"] / 1e12
        cuda = cuda_devices(devices)
        if cuda:
            math_kind = peak_math(fields.get("precision", "fp32"), is_language_model(args.model))
            entry["peak_math"] = math_kind
            found = datasheet_peak(torch.cuda.get_device_name(cuda[0]), math_kind)
            if found:
                peak, source = found
                entry.update(peak_tflops=peak, peak_source=source, mfu=entry["tflops"] / (peak * gpus_used))
            else:
                entry["peak_source"] = f"none: {torch.cuda.get_device_name(cuda[0])} is not in the datasheet table"
    return entry


def repetition_means(times: list[list[float]]) -> list[float]:
    return [statistics.fmean(repetition) for repetition in times]


def write_document(path: Path, ctx: dict, results: list[dict]) -> None:
    """Writes the file whole (through a temporary beside it), so a reader never sees half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"pytorch_baseline_schema": SCHEMA_VERSION, "context": ctx, "results": results}
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    os.replace(partial, path)


def record(out: str, context: dict, results: list, entry: dict) -> None:
    """Adds one result, prints its line and writes the whole document again, so that a baseline
    killed later (a timeout, a crash) still leaves the results before it."""
    results.append(entry)
    report(entry)
    write_document(out, context, results)


def exit_status(results: list) -> int:
    """1 where a case failed; a skip is not a failure."""
    return 1 if any(r["error"] and not r["error"].startswith("skipped:") for r in results) else 0


def first_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text.splitlines()[0] if text else type(error).__name__


def free_cuda_memory() -> None:
    import gc
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def report(entry: dict) -> None:
    """One line per result on stderr, as parbench prints progress."""
    if entry["error"]:
        print(f"  {entry['name']}: {entry['error']}", file=sys.stderr, flush=True)
        return
    extra = f", MFU {entry['mfu']:.1%}" if entry["mfu"] is not None else ""
    print(f"  {entry['name']}: {entry['step_ms_median']:.2f} ms/step, {entry['items_per_second']:,.0f} items/s{extra}",
          file=sys.stderr, flush=True)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)

