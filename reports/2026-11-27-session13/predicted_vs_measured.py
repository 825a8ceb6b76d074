"""Issue 37's table: each case's measured step and peak per GPU beside --advise's prediction.

python3 predicted_vs_measured.py FILE.json [--summary]

One row per case (the median of its repetitions): step ms, predicted step ms and its error; per
GPU the measured peak (GiB), the predicted peak and its error, and `b`, the MiB allocated before
the case's set-up (peak - model states - activations: the batch, and anything earlier work left).
--summary: how many GPU rows are predicted within 5%, and the worst.
"""
import json
import re
import sys


def rows(path):
    data = json.load(open(path))
    for bench in data["benchmarks"]:
        if bench.get("aggregate_name") != "median":
            continue
        name = bench["run_name"].replace("train/", "")
        name = re.sub(r"/(batch|image|seq|precision|data|optimizer):[^/]+", "", name)
        name = re.sub(r"/iterations:\d+|/manual_time|/replicate:broadcast|/scaling:weak|/bucket_mib:25/overlap:on", "", name)
        devices = []
        for i in range(8):
            if f"peak_mem_gib_dev{i}" not in bench:
                continue
            peak = bench[f"peak_mem_gib_dev{i}"]
            base = peak - bench.get(f"activation_mem_gib_dev{i}", 0) - bench.get(f"model_state_mem_gib_dev{i}", 0)
            devices.append((peak, bench.get(f"predicted_peak_gib_dev{i}"), base * 1024))
        yield name, bench.get("step_ms", bench["real_time"]), bench.get("predicted_step_ms"), devices


def main():
    path = sys.argv[1]
    if "--summary" in sys.argv:
        errors = [(100 * (predicted / peak - 1), name, d) for name, _, _, devices in rows(path)
                  for d, (peak, predicted, _) in enumerate(devices) if predicted]
        within = sum(1 for e, _, _ in errors if abs(e) <= 5)
        worst = max(errors, key=lambda e: abs(e[0])) if errors else None
        print(f"{path}: {within} of {len(errors)} GPU rows predicted within 5%"
              + (f"; worst {worst[0]:+.1f}% ({worst[1]}, GPU {worst[2]})" if worst else ""))
        return
    print(f"{'case':<72} {'step ms':>8} {'predicted':>16} | per GPU: peak GiB, predicted, error, b = MiB before set-up")
    for name, step, predicted, devices in sorted(rows(path)):
        line = f"{name[:72]:<72} {step:8.2f} " + (f"{predicted:8.2f} {100 * (predicted / step - 1):+6.1f}%" if predicted else " " * 16)
        for peak, guess, base in devices:
            line += f" | {peak:6.2f} " + (f"{guess:6.2f} {100 * (guess / peak - 1):+6.1f}%" if guess else "     -        ") + f" b{base:5.0f}"
        print(line)


if __name__ == "__main__":
    main()
