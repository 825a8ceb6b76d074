#!/usr/bin/env bash
# Call K (5077a20, the kept design): mem2_tp_halves (sp on) under --advise=all, then tensor_parallel's 2-GPU tests.
set -u
mkdir -p build; [ -e build/parbench ] || ln -sf "$PWD/.prebuilt/parbench" build/parbench
export PARBENCH_JSON_TO_OUT=0 PARBENCH_PREBUILT_DIR=.prebuilt
MEM2_TIMEOUT=190 timeout -k 5 200 bash ci/gpu-check.sh prebuilt mem2_tp_halves 2>&1 | tail -3
mkdir -p /tmp/h; tar xzf "$OUT/results.tgz" -C /tmp/h; rm -f "$OUT/results.tgz"
cp /tmp/h/mem2_tp_halves.json /tmp/h/mem2_tp_halves.txt /tmp/h/mem2_tp_halves.stderr /tmp/h/gpus.csv "$OUT/" 2>/dev/null
grep -E "^  (single|tensor_parallel)" /tmp/h/mem2_tp_halves.txt | head -6
echo "tests at ${SECONDS}s"
PARBENCH_TEST_TIMEOUT=100 PARBENCH_GTEST_FILTER='TensorParallel.TwoGpusOnNccl*:TensorParallel.ARehearsed*' \
  timeout -k 5 110 bash ci/gpu-check.sh prebuilt test 2>&1 | tail -3
mkdir -p /tmp/t; tar xzf "$OUT/results.tgz" -C /tmp/t; rm -f "$OUT/results.tgz"
grep -E "OK \]|FAILED|Failure|Expected|actual|Which|SKIPPED" /tmp/t/gtest.log | head -40 > "$OUT/gtest_lines.txt"; cat "$OUT/gtest_lines.txt"
echo "done at ${SECONDS}s"
