"""The memory breakdown (docs/METRICS.md, "Memory"): the caching allocator's model states against
the tensors' bytes on every device of every eager case, and against the bytes-per-parameter
formula (fp32: SGD 8, AdamW 16 bytes a parameter) where one device holds every parameter, within
2%; AdamW and SGD, eager and graphed, on every strategy the visible GPUs allow."""
import re

from conftest import needs_gpus

GiB = 2**30


@needs_gpus(1)
def test_model_states_match_the_tensors_and_the_formula(run):
    ran = run("memory", "--strategies=single,model_parallel,pipeline,data_parallel,ddp", "--optimizer=sgd,adamw",
              "--precision=fp32", "--split-sizes=20", "--schedules=1f1b", "--cuda-graph=off,on", "--allreduce=off",
              "--busy-profile=off", "--repetitions=2", "--iterations=5", "--warmup=3")
    assert ran.status == 0, ran.last_line()
    bad, checked = [], 0
    for case in ran.results.train_cases():
        if case.skipped:
            continue
        assert case.ran and not case.errors, f"{case.name}: {case.errors[:1]}"
        graphed = case.fields.get("graph") == "on"
        for entry in case.repetitions:
            devices = sorted(int(m.group(1)) for key in entry if (m := re.match(r"param_mem_gib_dev(\d+)$", key)))
            assert devices, f"{case.name}: no memory breakdown"
            for d in devices:
                for counter in ("model_state_mem_gib", "activation_mem_gib", "peak_reserved_gib", "alloc_retries", "ooms"):
                    assert f"{counter}_dev{d}" in entry, f"{case.name} dev{d}: no {counter}"
                measured = entry[f"model_state_mem_gib_dev{d}"] * GiB
                tensors = sum(entry[f"{c}_mem_gib_dev{d}"] for c in ("param", "grad", "optim")) * GiB
                # A graphed case's states are read before its capture, beside cuBLAS's workspaces.
                if not graphed and abs(measured - tensors) > 0.02 * tensors:
                    bad.append(f"{case.name} dev{d}: allocator {measured / GiB:.4f} GiB, tensors {tensors / GiB:.4f} GiB")
                if not graphed and case.strategy in ("single", "ddp"):
                    formula = (16 if case.fields.get("optimizer") == "adamw" else 8) * entry["params"]
                    if abs(measured - formula) > 0.02 * formula:
                        bad.append(f"{case.name} dev{d}: allocator {measured / GiB:.4f} GiB, formula {formula / GiB:.4f} GiB")
                checked += 1
    assert checked and not bad, "\n".join(bad[:20])
