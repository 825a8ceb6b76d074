#!/usr/bin/env bash
# Call A: the zero GPU tests, gpt-6.7b under --advise=all (ZeRO-3 trains; single and ddp predicted not to fit), then zero's advise (eager).
set -u
mkdir -p build; [ -e build/parbench ] || ln -sf "$PWD/.prebuilt/parbench" build/parbench
export PARBENCH_JSON_TO_OUT=0 PARBENCH_PREBUILT_DIR=.prebuilt PARBENCH_TEST_TIMEOUT=120 PARBENCH_GTEST_FILTER='Zero/*TwoGpusOnNccl*'
MEM2_BIG_TIMEOUT=440 timeout -k 5 520 bash ci/gpu-check.sh prebuilt test mem2_big_advise 2>&1 | tail -30
tar xzf "$OUT/results.tgz" -C /tmp 2>/dev/null; cp /tmp/mem2_big_advise.json /tmp/mem2_big_advise.txt /tmp/mem2_big_advise.stderr "$OUT/" 2>/dev/null; grep -E "OK|FAILED" /tmp/gtest.log | head -8 > "$OUT/gtest_lines.txt"
mv "$OUT/results.tgz" /tmp/resultsA1.tgz
left=$(( 585 - SECONDS ))
echo "mem2_zero: ${left}s left"
if (( left > 100 )); then
  MEM2_ZERO_GRAPH=off MEM2_TIMEOUT=$((left - 15)) timeout -k 5 $((left - 5)) bash ci/gpu-check.sh prebuilt mem2_zero 2>&1 | tail -25
  mkdir -p /tmp/z; tar xzf "$OUT/results.tgz" -C /tmp/z
  cp /tmp/z/mem2_zero.json /tmp/z/mem2_zero.txt "$OUT/" 2>/dev/null
  rm -f "$OUT/results.tgz"
fi
ls "$OUT"
