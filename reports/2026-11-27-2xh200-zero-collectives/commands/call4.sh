#!/usr/bin/env bash
# Call 4: the zero GPU tests, gpt-6.7b with --advise=all, then one same-call A/B pair (bf7d794 against this binary).
set -u
mkdir -p build; [ -e build/parbench ] || ln -sf "$PWD/.prebuilt/parbench" build/parbench
export PARBENCH_JSON_TO_OUT=0 PARBENCH_PREBUILT_DIR=.prebuilt PARBENCH_TEST_TIMEOUT=120 PARBENCH_GTEST_FILTER='Zero/*TwoGpusOnNccl*'
MEM2_BIG_TIMEOUT=380 timeout -k 5 470 bash ci/gpu-check.sh prebuilt test mem2_big_advise 2>&1 | tail -40
tar xzf "$OUT/results.tgz" -C /tmp 2>/dev/null; cp /tmp/mem2_big_advise.json "$OUT/" 2>/dev/null; grep -E "OK|FAILED" /tmp/gtest.log | head -8 > "$OUT/gtest_lines.txt"
left=$(( 575 - SECONDS ))
echo "A/B: ${left}s left"
if (( left > 90 )); then
  sed -i 's/for i in 1 2; do/for i in 1; do/' .prebuilt/ab.sh
  timeout -k 5 $((left - 5)) bash .prebuilt/ab.sh
fi
