"""Predicted against measured, across two runs: the predictions `parbench --advise` made on one
H200 (h200-one-gpu/, every 2-GPU case predicted from its parts sharing that GPU) and the step
times measured on the 2-GPU machine (x2-run2/). Prints the markdown tables of RUN.md.

    python3 reports/2xh200-2026-11-24-advise/compare.py
"""
import json
import pathlib

HERE = pathlib.Path(__file__).parent
SETUP_PARTS = ("train", "resnet50", "batch:120", "image:128", "precision:fp32", "data:device")


def short(name: str) -> str:
    """The case's name without its set-up, which every case here shares."""
    return "/".join(part for part in name.split("/") if part not in SETUP_PARTS)


def predictions(path: pathlib.Path) -> dict[str, float]:
    context = json.loads(path.read_text())["context"]
    return {p["name"]: p["predicted_step_ms"] for p in json.loads(context["advise_predictions"])}


def measured(path: pathlib.Path) -> dict[str, float]:
    """Median step_ms per case, under the name --advise gives it (no Google Benchmark suffixes)."""
    medians = {}
    for entry in json.loads(path.read_text())["benchmarks"]:
        if entry.get("aggregate_name") == "median" and "step_ms" in entry:
            name = entry["run_name"].split("/iterations:")[0].removesuffix("/manual_time")
            medians[name] = entry["step_ms"]
    return medians


def main() -> None:
    predicted = predictions(HERE / "h200-one-gpu" / "one_gpu_128.json")
    times = measured(HERE / "x2-run2" / "advise_128.json")
    for graphed in (True, False):
        rows = sorted(((name, p, times[name]) for name, p in predicted.items()
                       if name in times and name.endswith("/graph:on") == graphed), key=lambda row: row[2])
        print(f"\n#### {'CUDA graph' if graphed else 'eager'}\n")
        print("| case | predicted (ms) | measured (ms) | error |")
        print("| --- | --- | --- | --- |")
        for name, p, m in rows:
            print(f"| {short(name)} | {p:.2f} | {m:.2f} | {(p - m) / m:+.1%} |")
        pipeline = [abs(p - m) / m for name, p, m in rows if name.startswith("train/pipeline/")]
        unpredicted = sorted(set(n for n in times if n.endswith("/graph:on") == graphed) - set(predicted))
        unmeasured = sorted(set(n for n in predicted if n.endswith("/graph:on") == graphed) - set(times))
        print(f"\nPipeline cases: {len(pipeline)}, mean absolute error {sum(pipeline) / len(pipeline):.1%}, "
              f"largest {max(pipeline):.1%}. Measured but not predicted here: "
              + (", ".join(map(short, unpredicted)) or "none") + ". Predicted but without a measurement: "
              + (", ".join(map(short, unmeasured)) or "none") + ".")


if __name__ == "__main__":
    main()
