#!/usr/bin/env bash
# The GPU routine: build parbench (or take binaries built elsewhere), run the GPU tests, run suites.
#   ci/gpu-check.sh STEP...   steps, in the order given:
#     build         build into build-gpu/ with ci/build.sh (below: a machine without network)
#     prebuilt      instead of build: take build/parbench and build/tests/parbench_tests (see step_prebuilt)
#     test          the GPU tests: GoogleTest's GPU cases and tests/gpu/ (pytest, which python3
#                   must have), which skip where fewer GPUs are visible than they need
#     suite:NAME    the runs of benchmarks/suites/NAME.toml (python -m parbench_results.suite),
#                   refused before it starts where it needs more GPUs than are visible
#   e.g. bash ci/gpu-check.sh prebuilt test suite:reference-2gpu
# PARBENCH_BENCH_TIMEOUT=SECONDS: each suite run is stopped after that long, so that one hang
# cannot take the whole routine.
# A machine without network: Google Benchmark, GoogleTest and nlohmann/json come as files in
# .deps/: Debian packages (.deb files copied there), unpacked into a prefix, and Google
# Benchmark's source, built in Release there (seconds), as ci/setup.sh builds it everywhere.
# `bash ci/setup.sh`, run once on a machine with network, leaves that source
# (.deps/benchmark_1.7.1.orig.tar.gz) in .deps/.
# Everything (logs, JSON) goes to $OUT/results.tgz (OUT defaults to gpu-results/). A failing step
# is reported and the later steps still run.
# A build names the source's commit from git; where the checkout's .git is not the working
# tree's, run it as PARBENCH_GIT_SHA=<commit> ci/gpu-check.sh ...; a prebuilt binary names the
# commit it was built from by itself.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# NVLink multicast stays off: on shared hosts it can take the GPUs out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1

out=${OUT:-gpu-results}
results=$(mktemp -d "${TMPDIR:-/tmp}/parbench-results.XXXXXX")
# The unpacked dependencies: a folder of this run's own, not a fixed path another user could
# have filled, and last on the library path, so that they never shadow the machine's libraries.
deps=$(mktemp -d "${TMPDIR:-/tmp}/parbench-deps.XXXXXX")
mkdir -p "$out"
# Everything goes into results.tgz; then the scratch folders go.
trap 'tar czf "$out/results.tgz" -C "$results" . ; rm -rf "$results" "$deps"' EXIT

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

# Instead of build: build/parbench and build/tests/parbench_tests, built by ci/build.sh on a
# machine without GPUs against the same torch wheel (2.11.0+cu130) and carried here (or a copy of
# the two in PARBENCH_PREBUILT_DIR, as build/ has them, so that build/ may change meanwhile). They
# find this machine's LibTorch through LD_LIBRARY_PATH; Google Benchmark and GoogleTest are linked
# in statically. Their JSON names the commit they were built from (and whether it was dirty).
step_prebuilt() {
  local torch_lib
  torch_lib=$(python3 -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))") || return 1
  export LD_LIBRARY_PATH="$torch_lib:$torch_lib/../../nvidia/cu13/lib:$LD_LIBRARY_PATH"
  record_machine
  parbench=./${PARBENCH_PREBUILT_DIR:-build}/parbench
  gtest_binary=./${PARBENCH_PREBUILT_DIR:-build}/tests/parbench_tests
  "$parbench" --help >/dev/null && echo "prebuilt: $parbench runs against $torch_lib"
}

# After build: every test through ctest (PARBENCH_CTEST_REGEX=...: those whose names match), the
# GPU tests among them. After prebuilt: GoogleTest's GPU cases (PARBENCH_GTEST_FILTER; those
# that start parbench are given the carried binary through PARBENCH_BINARY), then tests/gpu/
# with pytest.
step_test() {
  local status=0
  if [[ -z $gtest_binary ]]; then
    ctest --test-dir build-gpu -j 8 --output-on-failure ${PARBENCH_CTEST_REGEX:+-R "$PARBENCH_CTEST_REGEX"} \
      >"$results/ctest.log" 2>&1 || status=1
    grep -E "tests passed|tests failed|\(Failed\)|\(SEGFAULT\)|Skipped|\*\*\*" "$results/ctest.log" | tail -n 20
    return $status
  fi
  PARBENCH_BINARY=$parbench timeout -k 10 "${PARBENCH_TEST_TIMEOUT:-600}" "$gtest_binary" \
    --gtest_filter="${PARBENCH_GTEST_FILTER:-*MultiGpu*:*GraphedS*:AdviseProfile.*:DataParallel.*:DeviceTimerGpu.*:*TwoGpusOnNccl*:*GraphedGptStages*:GpuLaunch.*:Llama.BuiltOnAGpu*}" \
    >"$results/gtest.log" 2>&1 || status=1
  grep -E "PASSED|FAILED|SKIPPED \[|tests ran" "$results/gtest.log" | tail -n 30
  PARBENCH_BINARY=$parbench PYTHONPATH="$PWD/plots${PYTHONPATH:+:$PYTHONPATH}" \
    timeout -k 10 "${PARBENCH_TEST_TIMEOUT:-600}" python3 -m pytest -q -rs -p no:cacheprovider tests/gpu \
    >"$results/pytest_gpu.log" 2>&1 || status=1
  tail -n 15 "$results/pytest_gpu.log"
  return $status
}

# suite:NAME: benchmarks/suites/NAME.toml's runs into $results/suite-NAME/, with suite.json.
step_suite() {
  local name=$1
  PYTHONPATH="$PWD/plots${PYTHONPATH:+:$PYTHONPATH}" python3 -m parbench_results.suite \
    "benchmarks/suites/$name.toml" --parbench "$parbench" --out "$results/suite-$name" \
    ${PARBENCH_BENCH_TIMEOUT:+--timeout "$PARBENCH_BENCH_TIMEOUT"}
}

for step in "$@"; do  # every step known before any runs
  case $step in
    build | prebuilt | test | suite:?*) ;;
    *) echo "gpu-check: unknown step '$step' (build, prebuilt, test, suite:NAME)" >&2; exit 2 ;;
  esac
done
failed=()
for step in "$@"; do
  echo "### $step"
  SECONDS=0
  case $step in
    build | prebuilt | test) "step_$step" || failed+=("$step") ;;
    suite:?*) step_suite "${step#suite:}" || failed+=("$step") ;;
  esac
  echo "### $step took ${SECONDS}s"
done
if ((${#failed[@]})); then
  echo "gpu-check: failed steps: ${failed[*]}"
  exit 1
fi
