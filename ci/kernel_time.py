"""Where a traced step's GPU time goes: the kernels of a Chrome trace (parbench --trace) summed by
kind, beside the span from the first kernel's start to the last one's end and the time no kernel
ran in it.

  python3 ci/kernel_time.py TRACE.json

Kinds, by kernel name (first match): collective (NCCL's kernels, on their own stream), matmul (cuBLAS/CUTLASS GEMMs), attention (flash, memory-
efficient and cuDNN attention), layer_norm, softmax/loss (softmax, log-softmax, NLL: the
cross-entropy), optimizer (the multi-tensor SGD update), copy (memcpy and memset), other
(elementwise: GELU, residual adds, casts, embedding, ...).
"""
from __future__ import annotations

import json
import re
import sys

KINDS = [
    ("collective", re.compile(r"nccl", re.I)),
    ("matmul", re.compile(r"gemm|cutlass|nvjet|xmma|cublas", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.I)),
    ("layer_norm", re.compile(r"layer_norm", re.I)),
    ("softmax/loss", re.compile(r"softmax|nll_loss|cross_entropy", re.I)),
    ("optimizer", re.compile(r"foreach|multi_tensor", re.I)),
]


def kind_of(event: dict) -> str:
    if event.get("cat") in ("gpu_memcpy", "gpu_memset"):
        return "copy"
    for kind, pattern in KINDS:
        if pattern.search(event.get("name", "")):
            return kind
    return "other"


def breakdown(trace: dict) -> dict:
    """{'span_us', 'idle_us', 'kinds': {kind: microseconds}} of the trace's GPU work."""
    events = [e for e in trace.get("traceEvents", [])
              if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not events:
        raise ValueError("the trace holds no GPU kernels")
    kinds: dict[str, float] = {}
    names: dict[str, float] = {}
    for event in events:
        kinds[kind_of(event)] = kinds.get(kind_of(event), 0.0) + float(event["dur"])
        names[event.get("name", "")] = names.get(event.get("name", ""), 0.0) + float(event["dur"])
    intervals = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events)
    busy, (start, end) = 0.0, intervals[0]
    for begin, finish in intervals[1:]:
        if begin > end:
            busy += end - start
            start, end = begin, finish
        else:
            end = max(end, finish)
    busy += end - start
    span = max(finish for _, finish in intervals) - intervals[0][0]
    return {"span_us": span, "idle_us": span - busy, "kinds": kinds, "kernels": names}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: kernel_time.py TRACE.json", file=sys.stderr)
        return 2
    try:
        with open(argv[1], encoding="utf-8") as file:
            result = breakdown(json.load(file))
    except (OSError, ValueError) as error:
        print(f"kernel_time: {argv[1]}: {error}", file=sys.stderr)
        return 2
    span = result["span_us"]
    total = sum(result["kinds"].values())
    print(f"{argv[1]}: GPU span {span / 1e3:.2f} ms, kernels {total / 1e3:.2f} ms, "
          f"no kernel running {result['idle_us'] / 1e3:.2f} ms ({result['idle_us'] / span:.1%})")
    for kind, micros in sorted(result["kinds"].items(), key=lambda item: -item[1]):
        print(f"  {kind:13s} {micros / 1e3:9.2f} ms  {micros / total:6.1%} of kernel time")
    print("  the longest kernels, summed by name:")
    for name, micros in sorted(result["kernels"].items(), key=lambda item: -item[1])[:10]:
        print(f"    {micros / 1e3:8.2f} ms  {name[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
