#!/usr/bin/env bash
# Call B: the zero GPU tests; zero's advise (eager), its ranks rehearsed; then gpt-6.7b: tensor_parallel against ZeRO-3 and the 1f1b pipeline.
set -u
mkdir -p build; [ -e build/parbench ] || ln -sf "$PWD/.prebuilt/parbench" build/parbench
export PARBENCH_JSON_TO_OUT=0 PARBENCH_PREBUILT_DIR=.prebuilt PARBENCH_TEST_TIMEOUT=120 PARBENCH_GTEST_FILTER='Zero/*TwoGpusOnNccl*'
MEM2_ZERO_GRAPH=off MEM2_TIMEOUT=150 timeout -k 5 260 bash ci/gpu-check.sh prebuilt test mem2_zero 2>&1 | tail -22
mkdir -p /tmp/z; tar xzf "$OUT/results.tgz" -C /tmp/z; rm -f "$OUT/results.tgz"
cp /tmp/z/mem2_zero.json /tmp/z/mem2_zero.txt "$OUT/" 2>/dev/null; grep -E "OK|FAILED" /tmp/z/gtest.log | head -8 > "$OUT/gtest_lines.txt"
left=$(( 588 - SECONDS ))
echo "mem2_big_tp: ${left}s left"
if (( left > 150 )); then
  MEM2_BIG_TIMEOUT=$((left - 20)) timeout -k 5 $((left - 8)) bash ci/gpu-check.sh prebuilt mem2_big_tp 2>&1 | tail -25
  mkdir -p /tmp/b; tar xzf "$OUT/results.tgz" -C /tmp/b; rm -f "$OUT/results.tgz"
  cp /tmp/b/mem2_big_tp.json /tmp/b/mem2_big_tp.txt /tmp/b/mem2_big_tp.stderr "$OUT/" 2>/dev/null
fi
ls "$OUT"
