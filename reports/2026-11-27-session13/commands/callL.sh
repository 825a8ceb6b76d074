#!/usr/bin/env bash
# Call L (main's head): the GPU tests (the stream joins, graph capture, the workspace release), then
# issue 37's ResNet-50 prediction table (mem2_predict_resnet) with what is left of the call.
set -u
mkdir -p build; [ -e build/parbench ] || ln -sf "$PWD/.prebuilt/parbench" build/parbench
export PARBENCH_JSON_TO_OUT=0 PARBENCH_PREBUILT_DIR=.prebuilt
nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv,noheader
PARBENCH_TEST_TIMEOUT=200 PARBENCH_GTEST_FILTER='*MultiGpu*:*GraphedS*:AdviseProfile.*:DataParallel.*:*TwoGpusOnNccl*:TensorParallel.ARehearsed*' \
  timeout -k 5 210 bash ci/gpu-check.sh prebuilt test 2>&1 | tail -6
mkdir -p /tmp/t; tar xzf "$OUT/results.tgz" -C /tmp/t; rm -f "$OUT/results.tgz"
grep -E "OK \]|FAILED|Failure|Expected|actual|Which|SKIPPED|tests ran" /tmp/t/gtest.log | head -80 > "$OUT/gtest_lines.txt"
cp /tmp/t/gtest.log "$OUT/gtest.log"
echo "resnet at ${SECONDS}s"
left=$(( 585 - SECONDS ))
MEM2_TIMEOUT=$((left - 15)) timeout -k 5 $((left - 5)) bash ci/gpu-check.sh prebuilt mem2_predict_resnet 2>&1 | tail -3
mkdir -p /tmp/h; tar xzf "$OUT/results.tgz" -C /tmp/h; rm -f "$OUT/results.tgz"
cp /tmp/h/mem2_predict_resnet.json /tmp/h/mem2_predict_resnet.txt /tmp/h/mem2_predict_resnet.stderr /tmp/h/gpus.csv "$OUT/" 2>/dev/null
echo "done at ${SECONDS}s"
