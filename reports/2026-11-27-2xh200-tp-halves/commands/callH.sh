#!/usr/bin/env bash
# Call H: tensor_parallel halves, each half on its own communicator (the commit in the JSON), sp on, eager and graphed,
# beside single under --advise=all; the halves' 2-GPU tests; a trace of the graphed halves step.
set -u
mkdir -p build; [ -e build/parbench ] || ln -sf "$PWD/.prebuilt/parbench" build/parbench
export PARBENCH_JSON_TO_OUT=0 PARBENCH_PREBUILT_DIR=.prebuilt
MEM2_TIMEOUT=200 timeout -k 5 215 bash ci/gpu-check.sh prebuilt mem2_tp_halves 2>&1 | tail -4
mkdir -p /tmp/h; tar xzf "$OUT/results.tgz" -C /tmp/h; rm -f "$OUT/results.tgz"
cp /tmp/h/mem2_tp_halves.json /tmp/h/mem2_tp_halves.txt /tmp/h/mem2_tp_halves.stderr "$OUT/" 2>/dev/null
grep -E "^  (single|tensor_parallel)" /tmp/h/mem2_tp_halves.txt | head -8
echo "tests at ${SECONDS}s"
PARBENCH_TEST_TIMEOUT=100 PARBENCH_GTEST_FILTER='TensorParallel.TwoGpusOnNccl*' \
  timeout -k 5 110 bash ci/gpu-check.sh prebuilt test 2>&1 | tail -3
mkdir -p /tmp/t; tar xzf "$OUT/results.tgz" -C /tmp/t; rm -f "$OUT/results.tgz"
grep -E "OK \]|FAILED|Failure|Expected|actual|Which|SKIPPED" /tmp/t/gtest.log | head -40 > "$OUT/gtest_lines.txt"; cat "$OUT/gtest_lines.txt"
echo "trace at ${SECONDS}s"
torch_lib=$(python3 -c "import os,torch;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export LD_LIBRARY_PATH="$torch_lib:$torch_lib/../../nvidia/cu13/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p /tmp/tr
timeout -k 5 90 ./.prebuilt/parbench --models=gpt2-medium --seq=1024 --batch=16 --precision=bf16 --optimizer=adamw --busy-profile=off \
  --allreduce=off --strategies=tensor_parallel --sequence-parallel=on --tp-halves=on --cuda-graph=on --trace=/tmp/tr \
  --repetitions=1 --iterations=3 --benchmark_min_time=0.1 > /tmp/tr/run.txt 2>&1; echo "trace run: exit $?"
for f in /tmp/tr/*.trace.json; do python3 .prebuilt/overlap.py "$f"; done
tar czf "$OUT/traces.tgz" -C /tmp/tr .
echo "done at ${SECONDS}s"
