#!/usr/bin/env bash
# Call N: the memory profile at the cases' own sizes and data_parallel's loss on device 0 (issue 37):
# ResNet-50's table eager, then gpt2-medium's one-process strategies eager, then its distributed ones with what is left.
set -u
mkdir -p build; [ -e build/parbench ] || ln -sf "$PWD/.prebuilt/parbench" build/parbench
export PARBENCH_JSON_TO_OUT=0 PARBENCH_PREBUILT_DIR=.prebuilt MEM2_PREDICT_GRAPH=off
collect() { mkdir -p /tmp/h; tar xzf "$OUT/results.tgz" -C /tmp/h; rm -f "$OUT/results.tgz"; for f in "$@"; do cp /tmp/h/$f.json /tmp/h/$f.txt /tmp/h/$f.stderr "$OUT/" 2>/dev/null; done; }
MEM2_TIMEOUT=160 timeout -k 5 170 bash ci/gpu-check.sh prebuilt mem2_predict_resnet 2>&1 | tail -2
collect mem2_predict_resnet
echo "gpt local at ${SECONDS}s"
MEM2_PREDICT_STRATEGIES=single,model_parallel,pipeline,data_parallel MEM2_PREDICT_SUFFIX=_local MEM2_TIMEOUT=250 \
  timeout -k 5 260 bash ci/gpu-check.sh prebuilt mem2_predict_gpt 2>&1 | tail -2
collect mem2_predict_gpt_local
echo "gpt distributed at ${SECONDS}s"
left=$(( 588 - SECONDS ))
MEM2_PREDICT_STRATEGIES=ddp,zero,tensor_parallel MEM2_PREDICT_SUFFIX=_ranks MEM2_TIMEOUT=$((left - 12)) \
  timeout -k 5 $((left - 5)) bash ci/gpu-check.sh prebuilt mem2_predict_gpt 2>&1 | tail -2
collect mem2_predict_gpt_ranks
cp /tmp/h/gpus.csv "$OUT/" 2>/dev/null
echo "done at ${SECONDS}s"
