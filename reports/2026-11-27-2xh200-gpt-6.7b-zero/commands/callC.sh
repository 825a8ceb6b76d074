#!/usr/bin/env bash
# Call C: the zero GPU tests, then zero's advise (eager) with the stage 3 rehearsal keeping real weights.
set -u
mkdir -p build; [ -e build/parbench ] || ln -sf "$PWD/.prebuilt/parbench" build/parbench
export PARBENCH_JSON_TO_OUT=0 PARBENCH_PREBUILT_DIR=.prebuilt PARBENCH_TEST_TIMEOUT=120 PARBENCH_GTEST_FILTER='Zero/*TwoGpusOnNccl*'
MEM2_ZERO_GRAPH=off MEM2_TIMEOUT=150 timeout -k 5 250 bash ci/gpu-check.sh prebuilt test mem2_zero 2>&1 | tail -22
mkdir -p /tmp/z; tar xzf "$OUT/results.tgz" -C /tmp/z; rm -f "$OUT/results.tgz"
cp /tmp/z/mem2_zero.json /tmp/z/mem2_zero.txt /tmp/z/mem2_zero.stderr "$OUT/" 2>/dev/null; grep -E "OK|FAILED" /tmp/z/gtest.log | head -8 > "$OUT/gtest_lines.txt"
ls "$OUT"
