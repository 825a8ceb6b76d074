#!/usr/bin/env bash
# Call O: the staged last stage's output and loss, and the workspaces (issue 37): the workspace GPU test,
# ResNet-50's table eager, gpt2-medium's one-process strategies eager.
set -u
mkdir -p build; [ -e build/parbench ] || ln -sf "$PWD/.prebuilt/parbench" build/parbench
export PARBENCH_JSON_TO_OUT=0 PARBENCH_PREBUILT_DIR=.prebuilt MEM2_PREDICT_GRAPH=off
collect() { mkdir -p /tmp/h; tar xzf "$OUT/results.tgz" -C /tmp/h; rm -f "$OUT/results.tgz"; for f in "$@"; do cp /tmp/h/$f.json /tmp/h/$f.txt "$OUT/" 2>/dev/null; done; }
PARBENCH_TEST_TIMEOUT=40 PARBENCH_GTEST_FILTER='AdviseProfile.MeasuresTheWorkspaces*' timeout -k 5 50 bash ci/gpu-check.sh prebuilt test 2>&1 | tail -3
mkdir -p /tmp/t; tar xzf "$OUT/results.tgz" -C /tmp/t; rm -f "$OUT/results.tgz"; cp /tmp/t/gtest.log "$OUT/gtest.log"
echo "resnet at ${SECONDS}s"
MEM2_TIMEOUT=120 timeout -k 5 128 bash ci/gpu-check.sh prebuilt mem2_predict_resnet 2>&1 | tail -2
collect mem2_predict_resnet
echo "gpt local at ${SECONDS}s"
left=$(( 330 - SECONDS ))
MEM2_PREDICT_STRATEGIES=single,model_parallel,pipeline,data_parallel MEM2_PREDICT_SUFFIX=_local MEM2_TIMEOUT=$((left - 10)) \
  timeout -k 5 $((left - 4)) bash ci/gpu-check.sh prebuilt mem2_predict_gpt 2>&1 | tail -2
collect mem2_predict_gpt_local
cp /tmp/h/gpus.csv "$OUT/" 2>/dev/null
echo "done at ${SECONDS}s"
