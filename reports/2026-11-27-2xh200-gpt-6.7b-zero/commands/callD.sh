#!/usr/bin/env bash
# Call D: tensor_parallel with --tp-halves=off,on (sp on, eager and graphed) beside single under --advise=all; then the 2-GPU tests of tensor_parallel and zero's waits.
set -u
mkdir -p build; [ -e build/parbench ] || ln -sf "$PWD/.prebuilt/parbench" build/parbench
export PARBENCH_JSON_TO_OUT=0 PARBENCH_PREBUILT_DIR=.prebuilt
MEM2_TIMEOUT=150 timeout -k 5 165 bash ci/gpu-check.sh prebuilt mem2_tp_halves 2>&1 | tail -20
mkdir -p /tmp/h; tar xzf "$OUT/results.tgz" -C /tmp/h; rm -f "$OUT/results.tgz"
cp /tmp/h/mem2_tp_halves.json /tmp/h/mem2_tp_halves.txt /tmp/h/mem2_tp_halves.stderr "$OUT/" 2>/dev/null
left=$(( 240 - SECONDS ))
echo "tests: ${left}s left"
if (( left > 30 )); then
  PARBENCH_TEST_TIMEOUT=$((left - 10)) PARBENCH_GTEST_FILTER='TensorParallel.TwoGpusOnNccl*:Zero/*ReportTheirWaits*' \
    timeout -k 5 $((left - 3)) bash ci/gpu-check.sh prebuilt test 2>&1 | tail -12
  mkdir -p /tmp/t; tar xzf "$OUT/results.tgz" -C /tmp/t; rm -f "$OUT/results.tgz"
  grep -E "OK \]|FAILED|Failure|Expected|actual|Which" /tmp/t/gtest.log | head -40 > "$OUT/gtest_lines.txt"
fi
ls "$OUT"
