#!/usr/bin/env bash
# Builds, tests and times parbench on a GPU machine in one call.
#   ci/gpu-check.sh STEP...   steps, in the order given: build, test, smoke, model_parallel,
#                             data_parallel, reference (= model_parallel data_parallel), tutorial,
#                             concurrent_single, graph, pipeline, advise, schedules, fault (2 GPUs),
#                             oom (1 GPU), host_cost (1 GPU), gpt (1 GPU: the transformer and MFU),
#                             provenance, timelines, harness_alone, harness_perturb, placement_pairs (1 GPU),
#                             before_after (1 GPU; PARBENCH_BEFORE_BINARY), advise_schedules, trace_pairs (1 GPU),
#                             clocks (1 GPU: clocks and throttling per repetition, idle and under a
#                             second process's GEMMs, and the stopping rule by noise),
#                             ref_* (issue 35's 2-GPU reference run: see reference_args),
#                             timer_gpu (the event timer on every GPU, and a mutant of it: PARBENCH_MUTANT_TESTS),
#                             cuts (4 GPUs: block-level cuts, interleaved-1f1b on 4 x 2 chunks),
#                             ref4_* (issue 42's 4-GPU reference run: see REFERENCE4_ARGS),
#                             again4_*, again2_* (issues 42 and 35 again on a 4-GPU machine: see step_again4_resnet),
#                             mem2_* (issues 37-39 on 2 GPUs: memory, zero, tensor_parallel; see MEM2_ARGS);
#                             default_pair (issue 41: the run with no flags on GPUs 0 and 1, a baseline
#                             binary's, PARBENCH_BASELINE_BINARY, then this one's, each timed),
#                             default_tail (the same, for the cases after the first 34 only);
#                             prebuilt instead of build: see step_prebuilt
# PARBENCH_BENCH_TIMEOUT=SECONDS: each parbench run of a step is killed after that long, so that
# one hang cannot take a whole device call.
# The GPU machines have no network: Google Benchmark, GoogleTest and nlohmann/json come as
# files in .deps/: Debian packages (cp ../shared/device-deps/*.deb .deps/), unpacked into a
# prefix, and Google Benchmark's source, built in Release there (seconds), as ci/setup.sh builds
# it everywhere. `bash ci/setup.sh`, run once on a machine with network, leaves that source
# (.deps/benchmark_1.7.1.orig.tar.gz) in .deps/.
# Everything (logs, JSON, figures, REPORT.md) goes to $OUT/results.tgz, traces to $OUT/traces.tgz;
# each parbench run's JSON also to $OUT directly. A failing step is reported and the later steps still run.
# The machine's copy carries the .git of the last landed commit, not of the working tree sent: a
# build there (step build) names the source's commit only when run as PARBENCH_GIT_SHA=<commit>
# ci/gpu-check.sh ...; a prebuilt binary names the commit it was built from by itself.
set -uo pipefail
cd "$(dirname "$0")/.."
# NVLink multicast stays off: on shared hosts it can take the GPUs out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1

out=${OUT:-gpu-results}
results=$(mktemp -d "${TMPDIR:-/tmp}/parbench-results.XXXXXX")
# The unpacked dependencies: a folder of this run's own, not a fixed path another user could
# have filled, and last on the library path, so that they never shadow the machine's libraries.
deps=$(mktemp -d "${TMPDIR:-/tmp}/parbench-deps.XXXXXX")
mkdir -p "$out"
# Traces (--trace) go into a tarball of their own: a device call brings back files of 16 MiB at most.
# Each bench's JSON is copied to $OUT as it ends (bench); everything else comes in the tarballs: a
# device call brings back 8 files at most. Then the scratch folders go.
trap 'tar czf "$out/results.tgz" --exclude=./traces -C "$results" . ; [[ -d $results/traces ]] && tar czf "$out/traces.tgz" -C "$results" traces; rm -rf "$results" "$deps"' EXIT

lib=$deps/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$lib"
parbench=./build-gpu/parbench
gtest_binary=""  # set by step_prebuilt: the tests then run from it, not through ctest

# The GPUs and the CPU, into the results and (in short) the output.
record_machine() {
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv | tee "$results/gpus.csv"
  lscpu >"$results/lscpu.txt"
  grep -E "^(Model name|CPU\(s\)|Thread\(s\) per core|NUMA node\(s\)|CPU max MHz)" "$results/lscpu.txt"
}

step_build() {
  for deb in .deps/*.deb; do dpkg -x "$deb" "$deps"; done
  record_machine
  # Google Benchmark is built under $deps, from .deps/'s tarball, whatever .deps/ carries built.
  PARBENCH_NO_APT=1 PARBENCH_BENCHMARK_PREFIX="$deps/benchmark-release" BUILD_DIR=build-gpu \
    BUILD_LOG="$results/cmake.log" bash ci/build.sh "-DGTest_DIR=$lib/cmake/GTest" \
    "-Dnlohmann_json_DIR=$deps/usr/share/cmake/nlohmann_json" >"$results/build.log" 2>&1
  local status=$?
  tail -n 3 "$results/build.log"
  return $status
}

# Instead of build, on a device call with little time: build/parbench and build/tests/parbench_tests,
# built by ci/build.sh on a machine without GPUs against the same torch wheel (2.11.0+cu130) and
# carried (carry: ["build/parbench", "build/tests/parbench_tests"]; or a copy of the two in
# PARBENCH_PREBUILT_DIR, as build/ has them, so that build/ may change meanwhile). They find this machine's
# LibTorch through LD_LIBRARY_PATH; Google Benchmark and GoogleTest are linked in statically. Their
# JSON names the commit they were built from (and whether it was dirty), read when they were built.
step_prebuilt() {
  local torch_lib
  torch_lib=$(python3 -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))") || return 1
  export LD_LIBRARY_PATH="$torch_lib:$torch_lib/../../nvidia/cu13/lib:$LD_LIBRARY_PATH"
  record_machine
  parbench=./${PARBENCH_PREBUILT_DIR:-build}/parbench
  gtest_binary=./${PARBENCH_PREBUILT_DIR:-build}/tests/parbench_tests
  "$parbench" --help >/dev/null && echo "prebuilt: $parbench runs against $torch_lib"
}

# PARBENCH_CTEST_REGEX=...: only the tests whose names match (with step_prebuilt: a GoogleTest
# filter, PARBENCH_GTEST_FILTER, default the GPU tests that start no parbench process).
step_test() {
  if [[ -n $gtest_binary ]]; then
    timeout -k 10 "${PARBENCH_TEST_TIMEOUT:-600}" "$gtest_binary" \
      --gtest_filter="${PARBENCH_GTEST_FILTER:-*MultiGpu*:*GraphedS*:AdviseProfile.*:DataParallel.*}" >"$results/gtest.log" 2>&1
    local status=$?
    grep -E "PASSED|FAILED|SKIPPED \[|tests ran" "$results/gtest.log" | tail -n 30
    return $status
  fi
  ctest --test-dir build-gpu -j 8 --output-on-failure ${PARBENCH_CTEST_REGEX:+-R "$PARBENCH_CTEST_REGEX"} \
    >"$results/ctest.log" 2>&1
  local status=$?
  grep -E "tests passed|tests failed|\(Failed\)|\(SEGFAULT\)|Skipped|\*\*\*" "$results/ctest.log" | tail -n 20
  grep -E "(MultiGpuEquivalence|Graphed|CudaGraph).*(Passed|Failed|Skipped)" "$results/ctest.log" | head -n 20
  return $status
}

# bench NAME ARGS...: one parbench run into NAME.json, its console table into NAME.txt.
bench() {
  local name=$1
  shift
  echo "== $name: parbench $*"
  local limit=()
  [[ -n ${PARBENCH_BENCH_TIMEOUT:-} ]] && limit=(timeout -k 10 "$PARBENCH_BENCH_TIMEOUT")
  "${limit[@]}" "$parbench" --benchmark_out="$results/$name.json" --benchmark_out_format=json "$@" \
    >"$results/$name.txt" 2>"$results/$name.stderr"
  local status=$?
  # Kept even if a later step runs out of time; PARBENCH_JSON_TO_OUT=0 where a call runs more
  # benches than the 8 files a device call brings back leave room for results.tgz.
  [[ ${PARBENCH_JSON_TO_OUT:-1} == 0 ]] || cp "$results/$name.json" "$out/" 2>/dev/null
  grep -E "_median|ERROR" "$results/$name.txt" | sed -E 's/ +/ /g' | cut -c1-230 | head -n 60
  return $status
}

step_smoke() {
  bench smoke --strategies=single,model_parallel,pipeline,data_parallel,ddp --precision=fp32 --split-sizes=20 \
    --repetitions=3 --benchmark_min_time=0.2 --warmup=3
}

# The reference run behind reports/, in files that each survive on their own.
step_model_parallel() {
  bench model_parallel --strategies=single,model_parallel,pipeline --precision=fp32,bf16 --benchmark_min_time=0.2
}

step_data_parallel() {
  local status=0
  bench data_parallel --strategies=single,data_parallel,ddp --precision=fp32,bf16 --overlap=on,off \
    --bucket-mib=25,100 --benchmark_min_time=0.2 || status=1
  # Issue 15's comparison: data_parallel at global batch 240 against single at 120 in one run,
  # both replication variants, eager and graphed (clone has no graph: listed as skipped).
  bench data_parallel_240 --strategies=single,data_parallel --batch=120,240 --precision=fp32,bf16 \
    --dp-replicate=broadcast,clone --cuda-graph=off,on --benchmark_min_time=0.2 || status=1
  return $status
}

# Issue 18: every single, model_parallel, pipeline, data_parallel and ddp (strong scaling: the same global
# batch) case predicted by --advise, then all of them measured, at the tutorial's set-up and at 224x224/128,
# graphed (the targets) and eager. ADVISE_IMAGES=128 or 224: one of the two.
step_advise() {
  local status=0
  local common=(--strategies=single,model_parallel,pipeline,data_parallel,ddp --scaling=strong --overlap=on,off
                --allreduce=off --precision=fp32 --cuda-graph=on,off --advise=all --benchmark_min_time=0.2)
  if [[ ${ADVISE_IMAGES:-128} == 128 ]]; then bench advise_128 "${common[@]}" || status=1; fi
  if [[ ${ADVISE_IMAGES:-224} == 224 ]]; then bench advise_224 "${common[@]}" --image=224 --batch=128 || status=1; fi
  return $status
}

# --advise for every pipeline schedule with both stages on GPU 0, graphed: each prediction beside
# the step it predicts (zb-h1's B/W halves and interleaved-1f1b's chunked cut, issue 26).
step_advise_schedules() {
  bench advise_schedules --strategies=single,model_parallel,pipeline --devices=0,0 --precision=fp32 \
    --schedules=tutorial,gpipe,1f1b,interleaved-1f1b,zb-h1 --chunks=2 --split-sizes=20,60 --cuda-graph=on \
    --advise=all --benchmark_min_time=0.2
  local status=$?
  python3 - "$results/advise_schedules.json" <<'PY' || status=1
import json, sys
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") == "median" and "predicted_step_ms" in b:
        error = (b["predicted_step_ms"] - b["step_ms"]) / b["step_ms"]
        print(f"advise_schedules: predicted {b['predicted_step_ms']:.2f} ms, measured {b['step_ms']:.2f} ms "
              f"({error:+.1%})  {b['run_name']}")
PY
  return $status
}

# Issue 25: what parbench's harness and its executors cost the host, against a bare loop, on GPU 0
# (ci/host-cost.sh; the ratios and their targets at the end).
step_host_cost() {
  bash ci/host-cost.sh "$(dirname "$parbench")" "$results/host_cost" 2>&1 | tee "$results/host_cost.txt"
}

# The same target with both sides alone in their processes, in adjacent pairs (ci/harness-alone.sh).
step_harness_alone() {
  bash ci/harness-alone.sh "$(dirname "$parbench")" "$results/harness_alone" 2>&1 | tee "$results/harness_alone.txt"
}

# Tracing and the busy profile against a plain run, single eager at batch 8 (ci/harness-perturb.sh).
step_harness_perturb() {
  bash ci/harness-perturb.sh "$(dirname "$parbench")" "$results/harness_perturb" 2>&1 | tee "$results/harness_perturb.txt"
}

# single's step timed by PARBENCH_BEFORE_BINARY (an earlier commit's build) and by this one, in
# alternating processes (ci/before-after.sh).
step_before_after() {
  bash ci/before-after.sh "${PARBENCH_BEFORE_BINARY:?step before_after needs PARBENCH_BEFORE_BINARY}" "$parbench" \
    "$results/before_after" 2>&1 | tee "$results/before_after.txt"
}

# Clocks and throttling per repetition (docs/METRICS.md): single, graphed, on GPU 0 idle, then
# while a second process runs bf16 GEMMs on the same GPU (its power and clock should show it),
# then the stopping rule by noise. Prints each repetition's time, clock, power, temperature,
# reasons and flag.
step_clocks() {
  local status=0
  local common=(--strategies=single --precision=fp32 --cuda-graph=on --repetitions=10 --benchmark_min_time=0.2
                --busy-profile=off)
  bench clocks_idle "${common[@]}" || status=1
  python3 - "$results/clocks_ready" <<'PY' &
import pathlib, sys, time, torch
a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
b = torch.empty_like(a)
for _ in range(20): torch.mm(a, a, out=b)
torch.cuda.synchronize()
pathlib.Path(sys.argv[1]).touch()
end = time.time() + 300
while time.time() < end:
    for _ in range(50): torch.mm(a, a, out=b)
    torch.cuda.synchronize()
PY
  local loader=$!
  for _ in $(seq 120); do [[ -e $results/clocks_ready ]] && break; sleep 1; done
  bench clocks_loaded "${common[@]}" || status=1
  kill "$loader" 2>/dev/null; wait "$loader" 2>/dev/null
  bench clocks_noise --strategies=single --precision=fp32 --cuda-graph=on --benchmark_min_time=0.2 --busy-profile=off \
    --max-noise=0.5% --min-repetitions=5 --max-repetitions=20 || status=1
  python3 - "$results"/clocks_idle.json "$results"/clocks_loaded.json "$results"/clocks_noise.json <<'PY' || status=1
import json, sys
ok = True
for path in sys.argv[1:]:
    run = json.load(open(path))
    print(f"{path}: clock_sampling={run['context'].get('clock_sampling')} threshold={run['context'].get('throttle_threshold')}")
    for e in run["benchmarks"]:
        if e["run_type"] != "iteration" or e.get("error_occurred"):
            continue
        keys = ("sm_clock_mhz_dev0", "sm_clock_max_mhz_dev0", "power_w_dev0", "temperature_c_dev0",
                "throttle_reasons_dev0", "throttled")
        print(f"  rep {e['repetition_index']}: {e['real_time']:.3f} ms " + " ".join(f"{k}={e.get(k)}" for k in keys))
        ok = ok and all(k in e for k in keys)
    noise = next((e.get("noise") for e in run["benchmarks"] if "noise" in e), None)
    if noise:
        print(f"  noise: {noise}")
print("every repetition has its clocks" if ok else "FAIL: a repetition lacks a clock counter")
sys.exit(0 if ok else 1)
PY
  return $status
}

# The CUDA-event timer across every GPU (issue 40): DeviceTimerGpu.* from the prebuilt test binary,
# then, where PARBENCH_MUTANT_TESTS names a test binary built with a mutant of core/device_timer.cpp
# (e.g. the timer reading device 0 only), the same tests from it, which must fail.
step_timer_gpu() {
  local binary=${gtest_binary:-./build-gpu/tests/parbench_tests} status=0
  "$binary" --gtest_filter='DeviceTimerGpu.*' >"$results/timer_gpu.log" 2>&1 || status=1
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|PASSED|FAILED  " "$results/timer_gpu.log" | sort -u
  if [[ -n ${PARBENCH_MUTANT_TESTS:-} ]]; then
    if "$PARBENCH_MUTANT_TESTS" --gtest_filter='DeviceTimerGpu.*' >"$results/timer_gpu_mutant.log" 2>&1; then
      echo "timer_gpu: FAIL: the mutant's DeviceTimerGpu tests passed"
      status=1
    else
      echo "timer_gpu: the mutant is caught:"
      grep -E "^\[  FAILED  \]|Expected|Which is|work on GPU" "$results/timer_gpu_mutant.log" | head -n 12
    fi
  fi
  return $status
}

# The pipeline plain and traced in adjacent processes (ci/trace-pairs.sh).
step_trace_pairs() {
  bash ci/trace-pairs.sh "$(dirname "$parbench")" "$results/trace_pairs" 2>&1 | tee "$results/trace_pairs.txt"
}

# model_parallel on GPU 0 against single, both in each process (ci/placement-pairs.sh).
step_placement_pairs() {
  bash ci/placement-pairs.sh "$(dirname "$parbench")" "$results/placement_pairs" 2>&1 | tee "$results/placement_pairs.txt"
}

# single on both GPUs at once, one process each: single's speed under the host load ddp's two
# ranks put on the machine, to tell host contention apart from communication.
step_concurrent_single() {
  local status=0
  CUDA_VISIBLE_DEVICES=1 "$parbench" --strategies=single --precision=fp32,bf16 --benchmark_min_time=0.2 \
    --benchmark_out="$results/concurrent_single_gpu1.json" --benchmark_out_format=json >/dev/null 2>&1 &
  local other=$!
  bench concurrent_single_gpu0 --strategies=single --precision=fp32,bf16 --benchmark_min_time=0.2 || status=1
  wait "$other" || status=1
  cp "$results/concurrent_single_gpu1.json" "$out/" 2>/dev/null
  return $status
}

# Eager steps against replays of one captured step (--cuda-graph), for single and ddp: what the
# host's dispatch costs each, and how ddp scales once it is gone.
step_graph() {
  local status=0
  bench graph --strategies=single,ddp --precision=fp32,bf16 --cuda-graph=off,on --bucket-mib=25,100 \
    --overlap=on --allreduce=off --repetitions=10 --benchmark_min_time=0.2 || status=1
  bench graph_buckets --strategies=single,ddp --precision=fp32 --cuda-graph=on --bucket-mib=5,10,25,50 \
    --overlap=on,off --allreduce=off --repetitions=10 --benchmark_min_time=0.2 || status=1
  return $status
}

# The pipeline targets (issue 14): graph pipelines over the split sizes, schedules and both cuts
# against single-graph, graph model_parallel, and the eager pipeline at split 20, each set-up's
# cases in one process with the single cases they are compared with.
step_pipeline() {
  local status=0
  local common=(--strategies=single,model_parallel,pipeline --precision=fp32 --repetitions=5 --benchmark_min_time=0.2)
  bench pipeline_128 "${common[@]}" --cuda-graph=off,on --split-sizes=10,12,15,20,24,30,40,60 \
    --benchmark_filter='single|model_parallel|graph:on|split:20/' || status=1
  bench pipeline_128_balanced "${common[@]}" --cut=balanced --cuda-graph=on --split-sizes=10,12,15,20,24,30,40,60 || status=1
  bench pipeline_224 "${common[@]}" --image=224 --batch=128 --cuda-graph=off,on --split-sizes=8,16,32,64 \
    --benchmark_filter='single|model_parallel|graph:on' || status=1
  bench pipeline_224_balanced "${common[@]}" --image=224 --batch=128 --cut=balanced --cuda-graph=on \
    --split-sizes=8,16,32,64 || status=1
  return $status
}

# Issue 20: the interleaved and zero-bubble schedules beside 1f1b and single under graphs, at both set-ups, with
# splits whose micro-batches fill whole rounds of 2 devices, on 2 and 3 chunks per device.
step_schedules() {
  local status=0
  local common=(--strategies=single,pipeline --precision=fp32 --cuda-graph=on --repetitions=5
                --benchmark_min_time=0.2 --schedules=1f1b,interleaved-1f1b,zb-h1 --chunks=2,3)
  bench schedules_128 "${common[@]}" --split-sizes=10,12,15,20,30,60 || status=1
  bench schedules_224 "${common[@]}" --image=224 --batch=128 --split-sizes=8,16,32,64 || status=1
  return $status
}

# Issue 42: cuts at block granularity, on 4 GPUs. interleaved-1f1b on 4 GPUs x 2 chunks (8 stages
# of ResNet-50's 18), 1f1b, zb-h1 and model_parallel on 4, all with the balanced cut, beside single,
# graphed, at both set-ups (splits whose micro-batches fill whole rounds of 4 devices); a plain
# pipeline of 8 stages, two on each GPU; and --advise, whose profile now times 18 stages
# (its "profiled in N s" lines say what that costs).
step_cuts() {
  local status=0
  local common=(--gpus=4 --strategies=single,model_parallel,pipeline --precision=fp32 --cuda-graph=on
                --repetitions=5 --benchmark_min_time=0.2 --schedules=1f1b,interleaved-1f1b,zb-h1 --chunks=2)
  bench cuts_128 "${common[@]}" --split-sizes=10,15,30 || status=1
  bench cuts_224 "${common[@]}" --image=224 --batch=128 --split-sizes=8,16,32 || status=1
  bench cuts_8_stages --devices=0,1,2,3,0,1,2,3 --strategies=pipeline --schedules=gpipe,1f1b --precision=fp32 \
    --split-sizes=15 --repetitions=3 --benchmark_min_time=0.2 || status=1
  bench cuts_advise --gpus=4 --strategies=single,model_parallel,pipeline --precision=fp32 --cuda-graph=on \
    --schedules=1f1b,interleaved-1f1b --chunks=2 --split-sizes=10,15,30 --advise=3 --repetitions=3 \
    --benchmark_min_time=0.2 || status=1
  grep -h "parbench advise:.*profiled" "$results/cuts_advise.txt" "$results/cuts_advise.stderr" 2>/dev/null | head -n 5
  return $status
}

# Issue 37: --optimizer=adamw on every strategy, eager and captured, and the memory breakdown
# measured by the caching allocator against the tensors' bytes and the bytes-per-parameter
# formula (fp32: SGD 8, AdamW 16 bytes per parameter), within 2%, on every device of every eager
# case. The graph:on AdamW cases must run without error; no test yet compares their replays'
# weights with eager AdamW steps on a GPU.
step_memory() {
  local status=0
  bench memory --strategies=single,model_parallel,pipeline,data_parallel,ddp --optimizer=sgd,adamw \
    --precision=fp32 --split-sizes=20 --schedules=1f1b --cuda-graph=off,on --allreduce=off --busy-profile=off \
    --repetitions=2 --iterations=5 --warmup=3 || status=1
  python3 - "$results/memory.json" <<'PY' || status=1
import json, re, sys
GiB = 2**30
bad, checked = [], 0
for entry in json.load(open(sys.argv[1]))["benchmarks"]:
    if entry["run_type"] != "iteration":
        continue
    name = entry["run_name"]
    if entry.get("error_occurred"):
        bad.append(f"{name}: {entry.get('error_message', '')[:160]}")
        continue
    adamw = "/optimizer:adamw" in name
    params = entry["params"]
    devices = sorted(int(m.group(1)) for k in entry if (m := re.match(r"param_mem_gib_dev(\d+)$", k)))
    tensors = {d: sum(entry[f"{c}_mem_gib_dev{d}"] for c in ("param", "grad", "optim")) * GiB for d in devices}
    for d in devices:
        measured = entry.get(f"model_state_mem_gib_dev{d}")
        if measured is None:
            bad.append(f"{name} dev{d}: no allocator measurement")
            continue
        measured *= GiB
        # The allocator's model states against the tensors' bytes on every device of an eager case
        # (a captured one's are read before its capture, with LibTorch's cuBLAS workspaces).
        if "/graph:on" not in name and abs(measured - tensors[d]) > 0.02 * tensors[d]:
            bad.append(f"{name} dev{d}: allocator {measured / GiB:.4f} GiB, tensors {tensors[d] / GiB:.4f} GiB")
        for counter in ("activation_mem_gib", "peak_reserved_gib", "alloc_retries", "ooms"):
            if f"{counter}_dev{d}" not in entry:
                bad.append(f"{name} dev{d}: no {counter}")
        checked += 1
    # Where one device holds every parameter (single, ddp's ranks), the formula.
    if name.startswith(("train/single/", "train/ddp/")) and "/graph:on" not in name:
        formula = (16 if adamw else 8) * params
        for d in devices:
            measured = entry[f"model_state_mem_gib_dev{d}"] * GiB
            if abs(measured - formula) > 0.02 * formula:
                bad.append(f"{name} dev{d}: allocator {measured / GiB:.4f} GiB, formula {formula / GiB:.4f} GiB")
    print(f"memory: {name.split('/manual_time')[0]}: " + ", ".join(
        f"dev{d} states {entry[f'model_state_mem_gib_dev{d}']:.3f} (tensors {tensors[d] / GiB:.3f}) "
        f"act {entry.get(f'activation_mem_gib_dev{d}', float('nan')):.2f} GiB" for d in devices if f"model_state_mem_gib_dev{d}" in entry))
print(f"memory: {checked} device readings checked, {len(bad)} problems")
for line in bad[:40]:
    print("memory: BAD", line)
sys.exit(1 if bad or not checked else 0)
PY
  return $status
}

# One ddp rank killed mid-case (README.md, "Exit status"): parbench must fail that case, run the
# next, record the failure in its JSON and exit 1. Prints the exit status, how long the launcher
# took to notice and how long the run took to end after the kill.
step_fault() {
  local json="$results/fault.json" stderr="$results/fault.stderr" marker="parbench-fault-$$"
  PARBENCH_FAULT_CHECK=$marker "$parbench" --strategies=ddp --precision=fp32 --overlap=on,off --allreduce=off \
    --repetitions=3 --iterations=200 --dist-timeout=20 --benchmark_out="$json" --benchmark_out_format=json \
    >"$results/fault.txt" 2>"$stderr" &
  local parbench_pid=$! rank="" child
  for _ in $(seq 1200); do  # rank 1 of the first case: the child of parbench with RANK=1
    for child in $(pgrep -P "$parbench_pid"); do
      tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null | grep -qx RANK=1 && rank=$child
    done
    [[ -n $rank ]] && break
    sleep 0.1
  done
  if [[ -z $rank ]]; then
    echo "fault: no rank 1 appeared"; kill "$parbench_pid"; wait "$parbench_pid"; return 1
  fi
  sleep 8  # into the case: set-up, warm-up or its 3 x 200 timed steps
  kill -9 "$rank"
  local killed_at noticed_at="" status
  killed_at=$(date +%s.%N)
  while kill -0 "$parbench_pid" 2>/dev/null; do
    [[ -z $noticed_at ]] && grep -q '^\[2/2' "$stderr" && noticed_at=$(date +%s.%N)
    sleep 0.05
  done
  wait "$parbench_pid"
  status=$?
  local ended_at left
  ended_at=$(date +%s.%N)
  left=$(grep -l "PARBENCH_FAULT_CHECK=$marker" /proc/[0-9]*/environ 2>/dev/null | grep -v "^/proc/$$/" | wc -l)
  local noticed="never"
  [[ -n $noticed_at ]] && noticed="$(awk -v a="$killed_at" -v b="$noticed_at" 'BEGIN { printf "%.1f s after the kill", b - a }')"
  echo "fault: parbench exit status $status (1 expected); the next case started: $noticed; the run ended" \
    "$(awk -v a="$killed_at" -v b="$ended_at" 'BEGIN { printf "%.1f", b - a }') s after the kill;" \
    "rank processes left: $left (0 expected)"
  echo "fault: last line on stderr: $(tail -n 1 "$stderr")"
  python3 - "$json" <<'PY'
import json, sys
outcomes = {}
for entry in json.load(open(sys.argv[1]))["benchmarks"]:
    if entry["run_type"] == "iteration":
        outcomes.setdefault(entry["run_name"].split("/iterations:")[0], []).append(entry.get("error_message", ""))
for name, errors in outcomes.items():
    print(f"fault: {name}: {len(errors)} repetitions, error: {errors[0] or 'none'}")
killed = [errors for name, errors in outcomes.items() if "overlap:on" in name]
ran = [errors for name, errors in outcomes.items() if "overlap:off" in name]
ok = (killed and all("rank 1 was killed by signal 9" in e for e in killed[0])
      and ran and not any(ran[0]))
sys.exit(0 if ok else 1)
PY
  local recorded=$?
  [[ $status == 1 && $recorded == 0 && $left == 0 ]]
}

# A case that fails on one GPU (README.md, "Exit status"): resnet50 at batch 4096 of 224x224
# runs out of memory, tinycnn after it must still run, the JSON must record both, and parbench
# must exit 1. Needs one GPU, where `fault` needs two.
step_oom() {
  local json="$results/oom.json"
  SECONDS=0
  "$parbench" --strategies=single --models=resnet50,tinycnn --batch=4096 --image=224 --precision=fp32 \
    --repetitions=2 --iterations=2 --warmup=1 --benchmark_out="$json" --benchmark_out_format=json \
    >"$results/oom.txt" 2>"$results/oom.stderr"
  local status=$?
  echo "oom: parbench exit status $status (1 expected) after ${SECONDS}s; last line on stderr: $(tail -n 1 "$results/oom.stderr")"
  python3 - "$json" <<'PY'
import json, sys
errors = {}
for entry in json.load(open(sys.argv[1]))["benchmarks"]:
    if entry["run_type"] == "iteration":
        errors.setdefault(entry["run_name"].split("/")[2], []).append(entry.get("error_message", ""))
for model, messages in errors.items():
    print(f"oom: {model}: {len(messages)} repetitions, error: {messages[0][:160] or 'none'}")
ok = ("out of memory" in " ".join(errors.get("resnet50", [""])).lower()
      and errors.get("tinycnn") and not any(errors["tinycnn"]))
sys.exit(0 if ok else 1)
PY
  local recorded=$?
  [[ $status == 1 && $recorded == 0 ]]
}

# Issues 29 and 26 on one GPU: gpt2-medium's MFU (single, bf16, batch 16, seq 1024, eager and
# graphed, with where its GPU time goes), ResNet-50's at the tutorial's set-up, the transformer's
# graph-replay tests, fp32 and bf16 at gpt2-small and gpt2-medium, and every schedule of
# gpt2-small in 2 stages on GPU 0, and --advise's predictions of it. GPT_STEPS picks some of: mfu
# resnet tests precisions schedules advise.
step_gpt() {
  local status=0 part began
  for part in ${GPT_STEPS:-mfu resnet tests precisions schedules advise}; do
    began=$SECONDS
    case $part in
      mfu)
        PARBENCH_BENCH_TIMEOUT=170 bench gpt_mfu --models=gpt2-medium --strategies=single --precision=bf16 --batch=16 \
          --cuda-graph=off,on --repetitions=5 --benchmark_min_time=1 --trace="$results/traces" || status=1
        local trace
        for trace in "$results"/traces/*.trace.json; do python3 ci/kernel_time.py "$trace"; done ;;
      resnet)
        PARBENCH_BENCH_TIMEOUT=120 bench resnet_mfu --models=resnet50 --strategies=single --precision=fp32,bf16 \
          --batch=120 --cuda-graph=on --repetitions=5 --benchmark_min_time=0.5 || status=1 ;;
      tests)
        timeout -k 10 150 "$gtest_binary" --gtest_filter='*GraphedGptStages*:Gpt*:*GptParameters*' >"$results/gpt_tests.log" 2>&1 ||
          status=1
        grep -E "eager loss|OK \]|FAILED|PASSED|tests ran" "$results/gpt_tests.log" | tail -n 30 ;;
      precisions)
        PARBENCH_BENCH_TIMEOUT=240 bench gpt_precisions --models=gpt2-small,gpt2-medium --strategies=single \
          --precision=fp32,bf16 --batch=8 --cuda-graph=off,on --busy-profile=off --repetitions=3 \
          --benchmark_min_time=0.3 || status=1 ;;
      schedules)
        PARBENCH_BENCH_TIMEOUT=300 bench gpt_schedules --models=gpt2-small --strategies=single,model_parallel,pipeline \
          --devices=0,0 --precision=bf16 --batch=8 --split-sizes=2 \
          --schedules=tutorial,gpipe,1f1b,interleaved-1f1b,zb-h1 --chunks=2 --cuda-graph=off,on --busy-profile=off \
          --repetitions=3 --benchmark_min_time=0.3 || status=1 ;;
      advise)
        PARBENCH_BENCH_TIMEOUT=200 bench gpt_advise --models=gpt2-small --strategies=single,model_parallel,pipeline \
          --devices=0,0 --precision=bf16 --batch=8 --split-sizes=2,4 --schedules=gpipe,1f1b,zb-h1 --cuda-graph=on \
          --advise=all --busy-profile=off --repetitions=3 --benchmark_min_time=0.3 || status=1 ;;
    esac
    echo "## gpt $part took $((SECONDS - began))s"
  done
  return $status
}

step_reference() {
  local status=0
  step_model_parallel || status=1
  step_data_parallel || status=1
  return $status
}

step_tutorial() {
  bench tutorial --preset=tutorial
}

# Issue 28: what the JSON context says of the machine: NVML's driver version, clocks and power
# limits, the environment and what parbench set, from one tiny case.
step_provenance() {
  bench provenance --strategies=single --models=tinycnn --batch=4 --image=32 --repetitions=1 --iterations=2 \
    || return 1
  python3 - "$results/provenance.json" <<'PY'
import json, sys
context = json.load(open(sys.argv[1]))["context"]
for key in ("parbench_json_schema", "nvml", "driver_version", "environment_set_by_parbench", "environment",
            "rank_hosts", "gpu_names"):
    print(f"provenance: {key} = {context.get(key)}")
settings = json.loads(context.get("gpu_settings", "[]"))
for gpu in settings:
    print("provenance: gpu_settings", json.dumps(gpu))
sys.exit(0 if context.get("nvml") == "ok" and context.get("driver_version", "unknown") != "unknown" and settings else 1)
PY
}

# Issue 26 on one GPU: the pipeline at split 20 under every schedule, both stages on GPU 0, timed
# without and with --trace in one process each (the timed steps must agree), the traced run
# leaving a trace and the simulator's prediction per case for the report's timelines. Per
# schedule it prints the predicted step beside the timed and traced ones and the predicted bubble
# beside the measured and ideal ones; it fails where a schedule has no .predicted.json.
step_timelines() {
  local status=0
  local common=(--strategies=single,pipeline --precision=fp32 --schedules=tutorial,gpipe,1f1b,interleaved-1f1b,zb-h1
                --chunks=2 --split-sizes=20 --devices=0,0 --repetitions=5 --benchmark_min_time=0.2)
  bench timelines_untraced "${common[@]}" || status=1
  bench timelines_traced "${common[@]}" --trace="$results/traces" || status=1
  python3 - "$results/timelines_untraced.json" "$results/timelines_traced.json" <<'PY' || status=1
import json, sys
def medians(path):
    return {b["run_name"]: b["real_time"] for b in json.load(open(path))["benchmarks"]
            if b.get("aggregate_name") == "median" and not b.get("error_occurred")}
plain, traced = medians(sys.argv[1]), medians(sys.argv[2])
for name in sorted(plain):
    if name in traced:
        print(f"timelines: {traced[name] / plain[name]:.3f} traced/untraced  {plain[name]:.2f} -> {traced[name]:.2f} ms  {name}")
PY
  python3 - "$results/timelines_untraced.json" "$results/timelines_traced.json" <<'PY' || status=1
import json, re, sys
sys.path.insert(0, "plots")
import pipeline_timeline as pt
plain = {b["run_name"]: b["real_time"] for b in json.load(open(sys.argv[1]))["benchmarks"]
         if b.get("aggregate_name") == "median" and not b.get("error_occurred")}
traces = {b["run_name"]: re.search(r"trace=([^;]*)", b["label"]).group(1)
          for b in json.load(open(sys.argv[2]))["benchmarks"]
          if b["run_type"] == "iteration" and "/pipeline/" in b["run_name"] and "trace=" in b.get("label", "")}
missing = [name for name in traces if not pt.predicted_path(traces[name]).is_file()]
for name in missing:
    print(f"timelines: NO .predicted.json for {name}")
def per_device(values):
    return "[" + ", ".join(f"{value:.2f}" for value in values) + "]"
for name, trace in sorted(traces.items()):
    if name in missing:
        continue
    predicted = pt.predicted_timeline(pt.predicted_path(trace))
    devices = predicted.timeline.devices
    measured = pt.measured_timeline(pt.read_trace(trace), devices, trace)
    ideal = pt.ideal_bubble(predicted.schedule, devices, predicted.micro_batches, predicted.chunks)
    step = predicted.timeline.step_ms
    timed = plain.get(name)
    versus = f"{timed:.2f} ms timed, predicted {(step - timed) / timed:+.1%}" if timed else "not timed"
    print(f"timelines: {predicted.schedule:<16} step predicted {step:.2f} ms ({versus}; traced {measured.step_ms:.2f} ms "
          f"from {measured.source}); bubble predicted {per_device(predicted.timeline.bubble)}, "
          f"measured {per_device(measured.bubble)}, ideal {ideal:.2f}")
print(f"timelines: {len(traces) - len(missing)} of {len(traces)} traced pipeline cases predicted")
sys.exit(1 if missing or len(traces) != 5 else 0)  # the five schedules above
PY
  ls "$results/traces" | head -n 20
  return $status
}

# The 2-GPU reference run (issue 35), at one commit, in two calls of at most 10 minutes:
#   call 1: ref_resnet_128 ref_data_parallel ref_allreduce ref_tutorial
#   call 2: ref_pairs ref_pytorch_resnet ref_gpt ref_pytorch_gpt ref_traces fault oom ref_pytorch_gpt_compile
#   call 3: ref_resnet_224 ref_rerun ref_pytorch_gpt_compile
# (ref_pairs: the parbench cases the PyTorch ResNet baselines match, beside them in one call.)
# A set-up's run is stopped after REFERENCE_SETUP_TIMEOUT seconds (default 220; its JSON then holds
# the cases completed); PARBENCH_BENCH_TIMEOUT bounds the others.
# Each set-up's cases run in one process (one per precision), so every ratio compares cases of one
# run; --advise=all puts each case's prediction beside its measurement. Sweeps are trimmed to fit
# (splits 10,20,30,60 at 128x128, 16,32,64 at 224x224) and the busy profile is off (the traces
# show where the time goes). RUN.md records which call each JSON came from. REFERENCE_DRY_RUN=1
# runs every part on one GPU, both stages or replicas on GPU 0 (--devices=0,0), one repetition of
# two steps and one split per sweep: it checks that every command line is accepted and every case
# starts, and times nothing. NCCL ranks cannot share a GPU: runs with ddp (`reference_args ddp`)
# get no --devices, so their ddp cases and the all-reduce are listed as skipped (needs 2 GPUs).
reference_args() {
  if [[ ${REFERENCE_DRY_RUN:-0} == 1 ]]; then
    [[ ${1:-} == ddp ]] || echo -n "--devices=0,0 "
    echo --repetitions=1 --iterations=2 --warmup=1 --busy-profile=off
  else
    echo --repetitions=5 --benchmark_min_time=0.1 --busy-profile=off
  fi
}
reference_splits() {  # a sweep's split sizes, the first alone in a dry run
  if [[ ${REFERENCE_DRY_RUN:-0} == 1 ]]; then echo "${1%%,*}"; else echo "$1"; fi
}
readonly REFERENCE_SCHEDULES=tutorial,gpipe,1f1b,interleaved-1f1b,zb-h1
readonly REFERENCE_STRATEGIES=single,model_parallel,pipeline,data_parallel,ddp

# ResNet-50 at a set-up (image, batch, splits): every strategy, the pipeline's split sweep under
# every schedule, ddp weak and strong, eager and graphed, each predicted by --advise, in one
# process per precision.
reference_resnet() {
  local image=$1 batch=$2 splits status=0 precision
  splits=$(reference_splits "$3")
  for precision in fp32 bf16; do
    # shellcheck disable=SC2046
    PARBENCH_BENCH_TIMEOUT=${REFERENCE_SETUP_TIMEOUT:-220} bench "ref_resnet_${image}_${precision}" \
      --strategies=$REFERENCE_STRATEGIES --scaling=weak,strong --allreduce=off --image="$image" --batch="$batch" \
      --precision="$precision" --cuda-graph=off,on --schedules=$REFERENCE_SCHEDULES --chunks=2 \
      --split-sizes="$splits" --advise=all $(reference_args ddp) || status=1
  done
  return $status
}
step_ref_resnet_128() { reference_resnet 128 120 20,10,30,60; }
step_ref_resnet_224() { reference_resnet 224 128 32,16,64; }

# data_parallel at global batch 120 and 240 beside single at both.
step_ref_data_parallel() {
  # shellcheck disable=SC2046
  bench ref_data_parallel --strategies=single,data_parallel --image=128 --batch=120,240 --precision=fp32,bf16 \
    --cuda-graph=off,on $(reference_args)
}

# The all-reduce of ResNet-50's gradients over NCCL, 2 ranks, across sizes (comm/allreduce).
step_ref_allreduce() {
  # shellcheck disable=SC2046
  bench ref_allreduce --strategies=ddp --image=128 --batch=120 --precision=fp32 --allreduce=on \
    --benchmark_filter=allreduce $(reference_args ddp)
}

step_ref_tutorial() {
  local devices=()
  [[ ${REFERENCE_DRY_RUN:-0} == 1 ]] && devices=(--devices=0,0 --repetitions=1 --iterations=2)
  bench ref_tutorial --preset=tutorial "${devices[@]}"
}

# The transformer: gpt2-medium, bf16, seq 1024, batch 16: every strategy, every pipeline schedule
# at 4 and 8 micro-batches, ddp weak, eager and graphed (MFU and peak memory are counters).
step_ref_gpt() {
  # shellcheck disable=SC2046
  PARBENCH_BENCH_TIMEOUT=${REFERENCE_SETUP_TIMEOUT:-220} bench ref_gpt --models=gpt2-medium --seq=1024 --batch=16 \
    --precision=bf16 --cuda-graph=off,on --strategies=$REFERENCE_STRATEGIES --schedules=$REFERENCE_SCHEDULES \
    --chunks=2 --split-sizes=$(reference_splits 4,2) --allreduce=off $(reference_args ddp)
}

# Traces of the pipeline under every schedule (ResNet-50 at split 20, eager) and of gpt2-medium's
# 1f1b and zb-h1, for the report's timelines.
step_ref_traces() {
  local status=0 devices=()
  [[ ${REFERENCE_DRY_RUN:-0} == 1 ]] && devices=(--devices=0,0)
  bench ref_traces_resnet --strategies=pipeline --precision=fp32 --schedules=$REFERENCE_SCHEDULES --chunks=2 \
    --split-sizes=20 --repetitions=1 --iterations=3 --trace="$results/traces" "${devices[@]}" || status=1
  bench ref_traces_gpt --models=gpt2-medium --seq=1024 --batch=16 --precision=bf16 --strategies=pipeline \
    --schedules=1f1b,zb-h1 --split-sizes=4 --repetitions=1 --iterations=3 --trace="$results/traces" \
    "${devices[@]}" || status=1
  return $status
}

# PyTorch's own implementations of the same cases (benchmarks/pytorch/), in the same call, into
# $results/pytorch_<set>/ (in results.tgz). The pipelining baselines take their cuts from
# parbench's JSON of the same call (PARBENCH_JSON).
pytorch_baselines() {  # SET PARBENCH_JSON [FOLDER, default pytorch_SET]
  local set=$1 parbench_json=$2 folder=${3:-pytorch_$1}
  echo "== pytorch $set: benchmarks/pytorch/run_all.sh"
  PARBENCH_JSON=$parbench_json bash benchmarks/pytorch/run_all.sh "$results/$folder" "$set" 2>&1 | tail -n 15
  return "${PIPESTATUS[0]}"
}
step_ref_pytorch_resnet() { pytorch_baselines resnet "$results/ref_pairs_resnet.json"; }
# parbench's cases that the PyTorch ResNet baselines match, for a call that runs the baselines
# without the whole set-up: 128x128, batch 120, fp32.
step_ref_pairs() {
  local status=0
  # shellcheck disable=SC2046
  bench ref_pairs_resnet --strategies=single,model_parallel,pipeline,ddp --image=128 --batch=120 --precision=fp32 \
    --cuda-graph=off,on --schedules=tutorial,gpipe,1f1b,interleaved-1f1b --chunks=2 --split-sizes=20 --scaling=weak \
    --allreduce=off $(reference_args ddp) || status=1
  # shellcheck disable=SC2046
  bench ref_pairs_dp --strategies=single,data_parallel --image=128 --batch=120,240 --precision=fp32 $(reference_args) ||
    status=1
  return $status
}
# Call 3: the baselines that failed in call 2 ("Invalid device argument" before CUDA's lazy init),
# beside parbench's matching cases, and ddp for gpt2-medium (ref_gpt reached its limit before it).
step_ref_rerun() {
  local status=0
  # shellcheck disable=SC2046
  bench ref_rerun_resnet --strategies=single,data_parallel --image=128 --batch=120,240 --precision=fp32 \
    --cuda-graph=off,on $(reference_args) || status=1
  ONLY=single_resnet_graph,data_parallel pytorch_baselines resnet "$results/ref_rerun_resnet.json" || status=1
  # shellcheck disable=SC2046
  bench ref_gpt_ddp --models=gpt2-medium --seq=1024 --batch=16 --precision=bf16 --cuda-graph=off,on \
    --strategies=single,ddp --allreduce=off $(reference_args ddp) || status=1
  ONLY=single_gpt pytorch_baselines gpt "$results/ref_gpt_ddp.json" || status=1
  return $status
}
step_ref_pytorch_tutorial() { pytorch_baselines tutorial-method "$results/ref_tutorial.json"; }
step_ref_pytorch_gpt() { pytorch_baselines gpt "$results/ref_gpt.json"; }
# torch.compile of gpt2-medium, capped by what is left of a 10-minute call (REFERENCE_CALL_S, default 570 s).
step_ref_pytorch_gpt_compile() {
  local left
  left=$(call_seconds_left "${REFERENCE_CALL_S:-570}")
  if (( left < 60 )); then echo "ref_pytorch_gpt_compile: ${left}s left of the call, not started"; return 1; fi
  COMPILE_TIMEOUT=$left pytorch_baselines gpt-compile "$results/ref_gpt.json"
}

# The 4-GPU reference run (issue 42), in two calls of at most 10 minutes on one warm machine:
#   call A (the targets, with their baselines in the same call): timer_gpu ref4_resnet_128 ref4_scaling
#     ref4_data_parallel ref4_resnet_224 ref4_allreduce ref4_pytorch
#   call B (the rest of the coverage): ref4_eager ref4_bf16 ref4_gpt ref4_pytorch_gpt clocks memory
# Every pipeline schedule at 4 stages (interleaved-1f1b: 4 GPUs x 2 chunks, 8 stages at block
# granularity) with its split sweep, and each strategy at 1, 2 and 4 GPUs (--gpus=1,2,4), with
# --advise=all, so each case carries its prediction. Call A's sweeps are graphed (the targets are
# graphed pipelines; eager pipelines move by up to 1.7x between processes, RUN.md of the 2-GPU
# run), call B's eager. Three repetitions (graphed spreads are under 1%); REFERENCE_SETUP_TIMEOUT
# bounds each process.
readonly REFERENCE4_ARGS="--repetitions=3 --benchmark_min_time=0.1 --busy-profile=off"
reference4_sweep() {  # NAME IMAGE BATCH SPLITS PRECISION GRAPH: every strategy at 4 GPUs, the pipeline's sweep
  local name=$1 image=$2 batch=$3 splits=$4 precision=$5 graph=$6
  # shellcheck disable=SC2086
  PARBENCH_BENCH_TIMEOUT=${REFERENCE_SETUP_TIMEOUT:-200} bench "$name" --gpus=4 \
    --strategies=$REFERENCE_STRATEGIES --scaling=weak,strong --allreduce=off --image="$image" --batch="$batch" \
    --precision="$precision" --cuda-graph="$graph" --schedules=$REFERENCE_SCHEDULES --chunks=2 \
    --split-sizes="$splits" --advise=all $REFERENCE4_ARGS
}
step_ref4_resnet_128() { reference4_sweep ref4_resnet_128_fp32 128 120 10,15,30 fp32 on; }
step_ref4_resnet_224() { reference4_sweep ref4_resnet_224_fp32 224 128 8,16,32 fp32 on; }
# Scaling: every strategy at 1, 2 and 4 GPUs, eager and graphed, ddp weak and strong
# (data_parallel's batch is global: 120 over N GPUs is its strong scaling).
step_ref4_scaling() {
  # shellcheck disable=SC2086
  PARBENCH_BENCH_TIMEOUT=${REFERENCE_SETUP_TIMEOUT:-200} bench ref4_scaling_128_fp32 --gpus=1,2,4 \
    --strategies=$REFERENCE_STRATEGIES --scaling=weak,strong --allreduce=off --image=128 --batch=120 \
    --precision=fp32 --cuda-graph=off,on --schedules=1f1b,zb-h1 --split-sizes=15 --advise=all $REFERENCE4_ARGS
}
# data_parallel at global batch 480 (120 per GPU) and 120 on 4 GPUs, beside single at both.
step_ref4_data_parallel() {
  # shellcheck disable=SC2086
  bench ref4_data_parallel --gpus=4 --strategies=single,data_parallel --image=128 --batch=120,480 --precision=fp32 \
    --cuda-graph=off,on $REFERENCE4_ARGS
}
step_ref4_allreduce() {
  local status=0
  # shellcheck disable=SC2086
  bench ref4_allreduce_2 --gpus=2 --strategies=ddp --image=128 --batch=120 --precision=fp32 --allreduce=on \
    --benchmark_filter=allreduce $REFERENCE4_ARGS || status=1
  # shellcheck disable=SC2086
  bench ref4_allreduce_4 --gpus=4 --strategies=ddp --image=128 --batch=120 --precision=fp32 --allreduce=on \
    --benchmark_filter=allreduce $REFERENCE4_ARGS || status=1
  return $status
}
# PyTorch's DDP (4 ranks x 120, eager) and torch.distributed.pipelining (4 ranks; each schedule at
# the cut of parbench's matching case in this call), beside parbench's.
step_ref4_pytorch() {
  NPROC=4 RESNET_SPLITS=15 ONLY=ddp,pipelining_resnet pytorch_baselines resnet "$results/ref4_resnet_128_fp32.json" \
    pytorch4_resnet
}
step_ref4_eager() {
  local status=0
  reference4_sweep ref4_resnet_128_fp32_eager 128 120 10,15,30 fp32 off || status=1
  reference4_sweep ref4_resnet_224_fp32_eager 224 128 8,16,32 fp32 off || status=1
  return $status
}
step_ref4_bf16() {
  local status=0
  reference4_sweep ref4_resnet_128_bf16 128 120 10,15,30 bf16 on || status=1
  reference4_sweep ref4_resnet_224_bf16 224 128 8,16,32 bf16 on || status=1
  return $status
}
# gpt2-medium, bf16, seq 1024, batch 16, every strategy and schedule at 4 GPUs (8 micro-batches
# at split 2; interleaved 4 x 2 chunks), eager and graphed.
step_ref4_gpt() {
  # shellcheck disable=SC2086
  PARBENCH_BENCH_TIMEOUT=${REFERENCE_SETUP_TIMEOUT:-200} bench ref4_gpt --gpus=4 --models=gpt2-medium --seq=1024 \
    --batch=16 --precision=bf16 --cuda-graph=off,on --strategies=$REFERENCE_STRATEGIES \
    --schedules=$REFERENCE_SCHEDULES --chunks=2 --split-sizes=2 --allreduce=off --advise=all $REFERENCE4_ARGS
}
step_ref4_pytorch_gpt() { NPROC=4 GPT_SPLITS=2 ONLY=pipelining_gpt pytorch_baselines gpt "$results/ref4_gpt.json" pytorch4_gpt; }

# Issues 35 and 42 again, once --advise predicts each staged case from the cut it runs, in one
# call on a 4-GPU machine (PARBENCH_JSON_TO_OUT=0: everything comes back in results.tgz):
#   again4_resnet: ResNet-50 fp32 on 4 GPUs, 128x128 graphed and eager and 224x224 graphed: every
#     strategy, each schedule's split sweep, --advise=all (ref4_resnet_128's and _224's set-ups)
#   again2_resnet: the same machine's GPUs 0 and 1, 128x128, fp32 graphed and eager and bf16
#     graphed: every strategy, splits 20, 30, 40 and 60, --advise=all (issue 35's set-up, split 40 added)
#   again2_balanced: GPUs 0 and 1, 128x128 fp32 graphed: single and every schedule with
#     --cut=balanced in place of the tutorial's cut
step_again4_resnet() {
  local status=0
  reference4_sweep again4_resnet_128_fp32 128 120 10,15,30 fp32 on || status=1
  reference4_sweep again4_resnet_128_fp32_eager 128 120 10,15,30 fp32 off || status=1
  reference4_sweep again4_resnet_224_fp32 224 128 8,16,32 fp32 on || status=1
  return $status
}
again2() {  # NAME PRECISION GRAPH [ARGS...]: issue 35's 128x128 set-up on GPUs 0 and 1
  local name=$1 precision=$2 graph=$3
  shift 3
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES=0,1 PARBENCH_BENCH_TIMEOUT=${REFERENCE_SETUP_TIMEOUT:-200} bench "$name" --gpus=2 \
    --strategies=$REFERENCE_STRATEGIES --scaling=weak,strong --allreduce=off --image=128 --batch=120 \
    --precision="$precision" --cuda-graph="$graph" --schedules=$REFERENCE_SCHEDULES --chunks=2 \
    --split-sizes=20,30,40,60 $REFERENCE4_ARGS "$@"
}
step_again2_resnet() {
  local status=0
  again2 again2_resnet_128_fp32 fp32 on --advise=all || status=1
  again2 again2_resnet_128_fp32_eager fp32 off --advise=all || status=1
  again2 again2_resnet_128_bf16 bf16 on --advise=all || status=1
  return $status
}
step_again2_resnet_fp32() {  # again2_resnet's fp32 set-ups alone, graphed and eager
  local status=0
  again2 again2_resnet_128_fp32 fp32 on --advise=all || status=1
  again2 again2_resnet_128_fp32_eager fp32 off --advise=all || status=1
  return $status
}
step_again2_balanced() {
  CUDA_VISIBLE_DEVICES=0,1 PARBENCH_BENCH_TIMEOUT=${REFERENCE_SETUP_TIMEOUT:-200} bench again2_balanced_128_fp32 \
    --gpus=2 --strategies=single,pipeline --cut=balanced --image=128 --batch=120 --precision=fp32 --cuda-graph=on \
    --schedules=$REFERENCE_SCHEDULES --chunks=2 --split-sizes=20,30,40,60 $REFERENCE4_ARGS
}

# GPUs 0 and 1, 128x128 fp32 graphed: zb-h1 and 1f1b at split 60 (the best 2-GPU pipeline) beside
# single, under cuts one block either side of the tutorial's, one process per cut (--cut is global).
step_again2_cuts() {
  local status=0 cut index=0
  for cut in "stem,layer1,layer2.0,layer2.1,layer2.2|layer2.3,layer3,layer4,head" \
             "stem,layer1,layer2,layer3.0|layer3.1,layer3.2,layer3.3,layer3.4,layer3.5,layer4,head" \
             "stem,layer1,layer2,layer3.0,layer3.1|layer3.2,layer3.3,layer3.4,layer3.5,layer4,head" \
             "stem,layer1,layer2.0,layer2.1|layer2.2,layer2.3,layer3,layer4,head"; do
    index=$((index + 1))
    CUDA_VISIBLE_DEVICES=0,1 PARBENCH_BENCH_TIMEOUT=${REFERENCE_SETUP_TIMEOUT:-200} bench "again2_cut${index}_128_fp32" \
      --gpus=2 --strategies=single,pipeline --cut="$cut" --image=128 --batch=120 --precision=fp32 --cuda-graph=on \
      --schedules=zb-h1,1f1b --split-sizes=60 $REFERENCE4_ARGS || status=1
  done
  return $status
}

# Issues 37, 38 and 39 on 2 GPUs: memory, sharded data parallel and tensor parallel.
#   mem2_tests: the GPU tests of zero and tensor_parallel (NCCL, eager and graphed, against ddp and
#     single)
#   mem2_gpt: gpt2-medium, bf16, seq 1024, AdamW, batch 16 (per rank for ddp and zero, global for
#     the others): single, ddp, zero stages 1-3, tensor_parallel (sequence parallel off and on) and
#     the pipeline (1f1b, interleaved-1f1b; 4 micro-batches), eager and graphed, in one process: the
#     time-memory table, each case with its memory breakdown and --advise's prediction
#     (MEM2_ADVISE=--advise=off, or empty, leaves the predictions out)
#   mem2_single: single's SGD against AdamW, and checkpointing off against blocks, eager and graphed
#   mem2_checkpoint: single and the 1f1b pipeline, checkpointing off and blocks, graphed, --advise=all
#   mem2_big: gpt-6.7b (bf16, AdamW) under ZeRO-3 on 2 GPUs beside single and ddp, which must run
#     out of memory without ending the run; per rank 12 sequences on GPUs above 100 GB, 4 below
#   mem2_zero: ddp and zero stages 1-3 alone, eager and graphed, each with --advise's prediction
#   mem2_big_advise: gpt-6.7b's single, ddp and ZeRO-3 in one process under --advise=all
#   mem2_big_tp: gpt-6.7b's ZeRO-3, tensor_parallel (sequence parallel on) and 1f1b pipeline at one
#     global batch, in one process
#   mem2_tp: single and tensor_parallel (sequence parallel off and on), eager and graphed, each with
#     --advise's time and memory (from a rank rehearsed alone on one GPU since 991473b)
#   mem2_tp_halves: single and tensor_parallel (sequence parallel MEM2_TP_SP, default on) with
#     --tp-halves=off,on, eager and graphed, --advise=all
#   mem2_tp_trace: single and tensor_parallel (sequence parallel off and on), one traced step each,
#     and where each one's GPU time goes (ci/kernel_time.py)
#   mem2_fit: the largest batch per rank under ddp and the zero stages of MEM2_FIT_STAGES (default
#     1,2,3), gpt2-large, bf16, AdamW; bounded by what is left of the call (MEM2_CALL_S, 575 s)
# Seconds left of a call of $1 seconds, less $2 for a step's own wind-down.
call_seconds_left() { echo $(( $1 - ($(date +%s) - CALL_STARTED) - ${2:-0} )); }
readonly MEM2_ARGS="--models=gpt2-medium --seq=1024 --batch=16 --precision=bf16 --optimizer=adamw --busy-profile=off"
step_mem2_tests() {
  PARBENCH_TEST_TIMEOUT=150 PARBENCH_GTEST_FILTER='*TwoGpusOnNccl*' step_test
}
step_mem2_gpt() {
  # shellcheck disable=SC2086
  PARBENCH_BENCH_TIMEOUT=${MEM2_TIMEOUT:-300} bench mem2_gpt $MEM2_ARGS \
    --strategies=single,ddp,zero,tensor_parallel,pipeline --zero-stages=1,2,3 --sequence-parallel=off,on \
    --schedules=1f1b,interleaved-1f1b --chunks=2 --split-sizes=4 --cuda-graph=off,on --allreduce=off \
    ${MEM2_ADVISE---advise=all} --repetitions=3 --benchmark_min_time=0.2
}
step_mem2_single() {
  # shellcheck disable=SC2086
  PARBENCH_BENCH_TIMEOUT=${MEM2_TIMEOUT:-150} bench mem2_single $MEM2_ARGS --strategies=single \
    --optimizer=sgd,adamw --checkpoint=off,blocks --cuda-graph=off,on --repetitions=3 --benchmark_min_time=0.2
}
# gpt2-medium under single and the 1f1b pipeline (4 micro-batches), checkpointing off and blocks,
# graphed, each with --advise's time and memory (a checkpointed case is timed from a profile of
# its own since 154421c)
step_mem2_checkpoint() {
  # shellcheck disable=SC2086
  PARBENCH_BENCH_TIMEOUT=${MEM2_TIMEOUT:-200} bench mem2_checkpoint $MEM2_ARGS --strategies=single,pipeline \
    --schedules=1f1b --split-sizes=4 --checkpoint=off,blocks --cuda-graph=on --allreduce=off --advise=all \
    --repetitions=3 --benchmark_min_time=0.2
}
# gpt-6.7b's sequences a rank for the mem2_big steps, from GPU 0's memory. gpt-6.7b's model
# states under AdamW: 16 bytes a parameter, 102 GiB whole, 51 GiB a rank under ZeRO-3 over 2;
# about 3.5 GiB of activations a sequence. Measured on H200s (2026-11-26): single fitted 8
# sequences (130.0 GiB); ZeRO-3 did not fit 16 a rank (it keeps the bf16 casts autograd saves,
# 13 GB). 12 a rank: single and ddp need about 143 GiB, a ZeRO-3 rank about 107. H100s: 4.
big_rank_batch() {
  local memory
  memory=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0)
  echo $((memory > 100000 ? 12 : 4))
}
step_mem2_big() {
  local batch status=0 left
  batch=$(big_rank_batch)
  echo "mem2_big: ${batch} sequences per rank (GPU 0's memory)"
  local common=(--models=gpt-6.7b --seq=1024 --batch="$batch" --precision=bf16 --optimizer=adamw --busy-profile=off
    --allreduce=off --warmup=2 --repetitions=3 --iterations=2)
  # ZeRO-3 first, so that a call running short still shows it; then single and ddp, bounded by
  # what is left of the call (MEM2_CALL_S).
  PARBENCH_BENCH_TIMEOUT=${MEM2_BIG_TIMEOUT:-200} bench mem2_big_zero "${common[@]}" --strategies=zero --zero-stages=3 ||
    status=1
  left=$(call_seconds_left "${MEM2_CALL_S:-575}" 10)
  if (( left < 60 )); then
    echo "mem2_big: ${left}s left of the call: single and ddp not started"
  else
    PARBENCH_BENCH_TIMEOUT=$left bench mem2_big_oom "${common[@]}" --strategies=single,ddp
  fi
  grep -hE "failed|out of memory|parbench:" "$results"/mem2_big_{zero,oom}.stderr | cut -c1-300 | tail -n 6
  # zero's stage 3 ran; single and ddp (where they ran) out of memory, the run going on
  python3 - "$results"/mem2_big_{zero,oom}.json <<'PY' || status=1
import json, sys
ran, failed = [], []
for path in sys.argv[1:]:
    for entry in json.load(open(path))["benchmarks"]:
        if entry["run_type"] != "iteration":
            continue
        name = entry["run_name"].split("/manual_time")[0]
        (failed if entry.get("error_occurred") else ran).append((name, entry.get("error_message", "")[:120]))
print("mem2_big: ran", sorted({n for n, _ in ran}))
print("mem2_big: failed", sorted(set(failed)))
sys.exit(0 if any("/zero/" in n for n, _ in ran) and not any("/zero/" in n for n, _ in failed) else 1)
PY
  return $status
}
# gpt-6.7b under single, ddp and ZeRO-3 in one process with --advise=all: the prediction flags
# single and ddp as not fitting before they run (and run out of memory, the run going on), and
# ZeRO-3 as fitting. Bounded by MEM2_BIG_TIMEOUT (420 s).
step_mem2_big_advise() {
  local batch
  batch=$(big_rank_batch)
  PARBENCH_BENCH_TIMEOUT=${MEM2_BIG_TIMEOUT:-420} bench mem2_big_advise --models=gpt-6.7b --seq=1024 --batch="$batch" \
    --precision=bf16 --optimizer=adamw --busy-profile=off --allreduce=off --warmup=2 --repetitions=3 --iterations=2 \
    --strategies=zero,single,ddp --zero-stages=3 --advise=all
  grep -E "predicted|does not fit|recommended|out of memory|failed|parbench:" "$results/mem2_big_advise.txt" \
    "$results/mem2_big_advise.stderr" | cut -c1-260 | head -n 20
  # parbench exits 1 for the cases that ran out of memory; the step passes where ZeRO-3 trained
  # and was predicted to fit, and single and ddp were predicted not to.
  python3 - "$results/mem2_big_advise.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
fits = {p["name"]: p.get("fits") for p in json.loads(run["context"].get("advise_predictions", "[]"))}
trained = {e["run_name"].split("/manual_time")[0] for e in run["benchmarks"]
           if e["run_type"] == "iteration" and not e.get("error_occurred")}
print("mem2_big_advise: fits", fits)
print("mem2_big_advise: trained", sorted(trained))
zero_ok = any("/zero/" in n for n in trained) and any("/zero/" in n and f for n, f in fits.items())
others_refused = all(f is False for n, f in fits.items() if "/single/" in n or "/ddp/" in n)
sys.exit(0 if zero_ok and others_refused and len(fits) >= 3 else 1)
PY
}
# Issue 39's table at gpt-6.7b, which no single GPU holds: tensor_parallel (sequence parallel on)
# against ZeRO-3 and the 1f1b pipeline on the same 2 GPUs, one process, at the same global batch
# (ZeRO-3: MEM2_BIG_TP_RANK_BATCH a rank, by default as mem2_big's: 12 on GPUs above 100 GB, 4
# below; the others that times 2). The filter keeps only those three cases of --batch's two
# values. Bounded by MEM2_BIG_TIMEOUT (420 s).
step_mem2_big_tp() {
  local per_rank=${MEM2_BIG_TP_RANK_BATCH:-$(big_rank_batch)}
  local global=$((2 * per_rank))
  PARBENCH_BENCH_TIMEOUT=${MEM2_BIG_TIMEOUT:-420} bench mem2_big_tp --models=gpt-6.7b --seq=1024 \
    --batch="$per_rank,$global" --precision=bf16 --optimizer=adamw --busy-profile=off --allreduce=off --warmup=2 \
    --repetitions=3 --iterations=2 --strategies=zero,tensor_parallel,pipeline --zero-stages=3 \
    --sequence-parallel=on --schedules=1f1b --split-sizes=2 \
    --benchmark_filter="(zero/gpt-6.7b/batch:$per_rank|tensor_parallel/gpt-6.7b/batch:$global|pipeline/gpt-6.7b/batch:$global)/"
}
step_mem2_zero() {
  # shellcheck disable=SC2086
  PARBENCH_BENCH_TIMEOUT=${MEM2_TIMEOUT:-200} bench mem2_zero $MEM2_ARGS --strategies=ddp,zero --zero-stages=1,2,3 \
    --cuda-graph=${MEM2_ZERO_GRAPH:-off,on} --allreduce=off --advise=all --repetitions=3 --benchmark_min_time=0.2
}
step_mem2_tp() {
  # shellcheck disable=SC2086
  PARBENCH_BENCH_TIMEOUT=${MEM2_TIMEOUT:-200} bench mem2_tp $MEM2_ARGS --strategies=single,tensor_parallel \
    --sequence-parallel=off,on --cuda-graph=off,on --allreduce=off --advise=all --repetitions=3 --benchmark_min_time=0.2
}
# Issue 39: tensor_parallel's two halves interleaved (--tp-halves=on) against the whole batch at
# once, sequence parallel on, eager and graphed, beside single, with --advise=all.
step_mem2_tp_halves() {
  # shellcheck disable=SC2086
  PARBENCH_BENCH_TIMEOUT=${MEM2_TIMEOUT:-200} bench mem2_tp_halves $MEM2_ARGS --strategies=single,tensor_parallel \
    --sequence-parallel="${MEM2_TP_SP:-on}" --tp-halves=off,on --cuda-graph=off,on --allreduce=off --advise=all \
    --repetitions=3 --benchmark_min_time=0.2
}
# Issue 37's prediction table on 2 GPUs: every strategy and schedule, checkpointing off and
# blocks, eager and graphed, in one process under --advise=all (each case's predicted peak per
# GPU beside its measured one). MEM2_PREDICT_GRAPH narrows --cuda-graph (default off,on).
#   mem2_predict_resnet: ResNet-50, 128x128, fp32, batch 120 (ddp and zero: per rank); the
#     pipeline's every schedule at micro-batches of 20 and 60
#   mem2_predict_gpt: gpt2-medium as MEM2_ARGS, tensor_parallel with sequence parallel off and
#     on, the pipeline's every schedule at micro-batches of 4 (MEM2_PREDICT_STRATEGIES narrows the
#     strategies, into mem2_predict_gpt$MEM2_PREDICT_SUFFIX.json: the whole set's profile takes
#     about 400 s on 2 H200s)
step_mem2_predict_resnet() {
  PARBENCH_BENCH_TIMEOUT=${MEM2_TIMEOUT:-400} bench mem2_predict_resnet --models=resnet50 --image=128 --batch=120 \
    --precision=fp32 --busy-profile=off --strategies=single,model_parallel,pipeline,data_parallel,ddp,zero \
    --zero-stages=1,2,3 --scaling=weak --schedules=tutorial,gpipe,1f1b,interleaved-1f1b,zb-h1 --chunks=2 \
    --split-sizes=20,60 --checkpoint=off,blocks --cuda-graph="${MEM2_PREDICT_GRAPH:-off,on}" --allreduce=off \
    --advise=all --repetitions=3 --benchmark_min_time=0.1
}
step_mem2_predict_gpt() {
  # shellcheck disable=SC2086
  PARBENCH_BENCH_TIMEOUT=${MEM2_TIMEOUT:-400} bench "mem2_predict_gpt${MEM2_PREDICT_SUFFIX:-}" $MEM2_ARGS \
    --strategies="${MEM2_PREDICT_STRATEGIES:-single,model_parallel,pipeline,data_parallel,ddp,zero,tensor_parallel}" --zero-stages=1,2,3 \
    --scaling=weak --sequence-parallel=off,on --schedules=tutorial,gpipe,1f1b,interleaved-1f1b,zb-h1 --chunks=2 \
    --split-sizes=4 --checkpoint=off,blocks --cuda-graph="${MEM2_PREDICT_GRAPH:-off,on}" --allreduce=off \
    --advise=all --repetitions=3 --benchmark_min_time=0.1
}
step_mem2_tp_trace() {
  local status=0 trace
  # shellcheck disable=SC2086
  PARBENCH_BENCH_TIMEOUT=${MEM2_TIMEOUT:-150} bench mem2_tp_trace $MEM2_ARGS --strategies=single,tensor_parallel \
    --sequence-parallel=off,on --allreduce=off --trace="$results/traces" --repetitions=1 --iterations=3 || status=1
  for trace in "$results"/traces/*.trace.json; do python3 ci/kernel_time.py "$trace" || status=1; done
  return $status
}
step_mem2_fit() {
  local left
  left=$(call_seconds_left "${MEM2_CALL_S:-575}" 10)
  if (( left < 60 )); then echo "mem2_fit: ${left}s left of the call, not started"; return 1; fi
  PARBENCH_BENCH_TIMEOUT=$left bench mem2_fit --models=gpt2-large --seq=1024 --batch=48 \
    --precision=bf16 --optimizer=adamw --busy-profile=off --strategies=ddp,zero --zero-stages="${MEM2_FIT_STAGES:-1,2,3}" \
    --allreduce=off --fit=batch --fit-max-batch=128 --warmup=2 --repetitions=2 --iterations=2
  local status=$?
  tail -n 3 "$results/mem2_fit.stderr" | cut -c1-400
  return $status
}

# Issue 41: the run with no flags on GPUs 0 and 1, of the baseline binary (PARBENCH_BASELINE_BINARY,
# the issue's commit, built elsewhere and carried) or of this one: `timed_default_run STEP WHICH
# OUTPUT [ARGUMENTS...]`, WHICH baseline or current, its stdout and stderr in $results/OUTPUT.*,
# bounded by DEFAULT_PAIR_TIMEOUT (280 s); one line of its wall time, stdout lines and cases
# started (the progress lines on stderr) in $results/STEP.txt. Fails where the run did.
timed_default_run() {
  local step=$1 which=$2 output=$3 binary=$parbench started ended rc=0
  shift 3
  if [[ $which == baseline ]]; then
    if [[ -z ${PARBENCH_BASELINE_BINARY:-} ]]; then
      echo "$step: PARBENCH_BASELINE_BINARY names no binary: the baseline run is left out"
      return 1
    fi
    binary=$PARBENCH_BASELINE_BINARY
  fi
  started=$(date +%s.%N)
  CUDA_VISIBLE_DEVICES=0,1 timeout -k 5 "${DEFAULT_PAIR_TIMEOUT:-280}" "$binary" "$@" \
    >"$results/$output.stdout" 2>"$results/$output.stderr" || rc=$?
  ended=$(date +%s.%N)
  echo "$step: $output ($binary): $(python3 -c "print(f'{$ended - $started:.1f}')") s wall," \
    "$(wc -l <"$results/$output.stdout") stdout lines, $(grep -c '^\[' "$results/$output.stderr") cases started," \
    "exit $rc" | tee -a "$results/$step.txt"
  return $rc
}

# The whole run, the baseline's and then this one's, in one call.
step_default_pair() {
  local status=0
  timed_default_run default_pair baseline default_baseline || status=1
  timed_default_run default_pair current default_current || status=1
  tail -n 12 "$results/default_current.stdout"
  return $status
}

# The cases after the first 34 of the run (ddp's weak case and the all-reduce sweep:
# DEFAULT_TAIL_FILTER), the baseline's and this one's alternately, DEFAULT_TAIL_PAIRS times (2):
# what a default_pair cut short by the call's limit did not reach.
step_default_tail() {
  local status=0 pair which
  for ((pair = 1; pair <= ${DEFAULT_TAIL_PAIRS:-2}; ++pair)); do
    for which in baseline current; do
      timed_default_run default_tail "$which" "tail_${which}_$pair" \
        "--benchmark_filter=${DEFAULT_TAIL_FILTER:-^train/ddp/|^comm/allreduce/}" || status=1
    done
  done
  return $status
}

CALL_STARTED=$(date +%s)  # for steps that fit themselves into what is left of the call
failed=()
for step in "$@"; do
  echo "### $step"
  SECONDS=0
  "step_$step" || failed+=("$step")
  echo "### $step took ${SECONDS}s"
done
if ((${#failed[@]})); then
  echo "gpu-check: failed steps: ${failed[*]}"
  exit 1
fi
