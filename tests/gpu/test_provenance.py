"""What a GPU run records of its machine and of each repetition (docs/JSON.md, docs/METRICS.md
"Clocks and throttling")."""
import json

from conftest import needs_gpus

CLOCK_COUNTERS = ("sm_clock_mhz_dev0", "sm_clock_max_mhz_dev0", "power_w_dev0", "temperature_c_dev0",
                  "throttle_reasons_dev0", "throttled")


@needs_gpus(1)
def test_the_context_names_the_driver_and_each_gpus_settings(run):
    ran = run("provenance", "--strategies=single", "--models=tinycnn", "--batch=4", "--image=32", "--repetitions=1",
              "--iterations=2")
    assert ran.status == 0, ran.last_line()
    context = ran.context
    assert context["nvml"] == "ok"
    assert context.get("driver_version", "unknown") != "unknown"
    assert context["devices"] == "cuda" and context["gpu_names"] not in ("none", "unknown")
    settings = json.loads(context["gpu_settings"])
    assert settings and all("name" in gpu and "nvml_index" in gpu for gpu in settings)
    assert "environment_set_by_parbench" in context


@needs_gpus(1)
def test_every_repetition_has_its_clocks(run):
    ran = run("clocks", "--strategies=single", "--models=tinycnn", "--batch=8", "--image=32", "--cuda-graph=on",
              "--repetitions=4", "--iterations=20", "--busy-profile=off")
    assert ran.status == 0, ran.last_line()
    assert ran.context["clock_sampling"] == "ok"
    single = ran.case("/single/")
    assert len(single.repetitions) == 4
    for entry in single.repetitions:
        missing = [counter for counter in CLOCK_COUNTERS if counter not in entry]
        assert not missing, f"repetition {entry['repetition_index']} lacks {missing}"
        assert entry["sm_clock_mhz_dev0"] > 0 and entry["sm_clock_max_mhz_dev0"] > 0


@needs_gpus(1)
def test_the_stopping_rule_by_noise_records_the_noise_reached(run):
    ran = run("noise", "--strategies=single", "--models=tinycnn", "--batch=8", "--image=32", "--cuda-graph=on",
              "--busy-profile=off", "--iterations=20", "--max-noise=50%", "--min-repetitions=3", "--max-repetitions=6")
    assert ran.status == 0, ran.last_line()
    single = ran.case("/single/")
    assert 3 <= len(single.repetitions) <= 6
    noise = single.repetitions[0]["noise"]
    assert noise["repetitions"] == len(single.repetitions) and noise["max_noise"] == 0.5
