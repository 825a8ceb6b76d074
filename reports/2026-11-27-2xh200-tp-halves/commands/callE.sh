#!/usr/bin/env bash
# Call E: tensor_parallel halves in turns of two collectives (94d8d91), sp off and on, eager and graphed, beside single under --advise=all;
# then tensor_parallel's 2-GPU tests; then an eager single A/B, bf7d794 (baseline) against the current binary, two alternating pairs.
set -u
mkdir -p build; [ -e build/parbench ] || ln -sf "$PWD/.prebuilt/parbench" build/parbench
export PARBENCH_JSON_TO_OUT=0 PARBENCH_PREBUILT_DIR=.prebuilt
nvidia-smi --query-gpu=name,memory.total,driver_version,power.limit --format=csv,noheader
MEM2_TP_SP=off,on MEM2_TIMEOUT=260 timeout -k 5 275 bash ci/gpu-check.sh prebuilt mem2_tp_halves 2>&1 | tail -8
mkdir -p /tmp/h; tar xzf "$OUT/results.tgz" -C /tmp/h; rm -f "$OUT/results.tgz"
cp /tmp/h/mem2_tp_halves.json /tmp/h/mem2_tp_halves.txt /tmp/h/mem2_tp_halves.stderr "$OUT/" 2>/dev/null
echo "tests at ${SECONDS}s"
PARBENCH_TEST_TIMEOUT=140 PARBENCH_GTEST_FILTER='TensorParallel.TwoGpusOnNccl*:TensorParallel.ARehearsed*' \
  timeout -k 5 150 bash ci/gpu-check.sh prebuilt test 2>&1 | tail -6
mkdir -p /tmp/t; tar xzf "$OUT/results.tgz" -C /tmp/t; rm -f "$OUT/results.tgz"
grep -E "OK \]|FAILED|Failure|Expected|actual|Which|SKIPPED" /tmp/t/gtest.log | head -40 > "$OUT/gtest_lines.txt"
echo "a/b at ${SECONDS}s"
torch_lib=$(python3 -c "import os,torch;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export LD_LIBRARY_PATH="$torch_lib:$torch_lib/../../nvidia/cu13/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
args=(--models=gpt2-medium --seq=1024 --batch=8 --precision=bf16 --optimizer=adamw --strategies=single --cuda-graph=off
      --repetitions=3 --benchmark_min_time=0.3)
mkdir -p /tmp/ab
for i in 1 2; do
  for which in baseline current; do
    bin=./.prebuilt/parbench; [[ $which == baseline ]] && bin=./.prebuilt/baseline/parbench
    start=$(date +%s)
    timeout -k 5 60 "$bin" "${args[@]}" --benchmark_out="/tmp/ab/ab_${which}_$i.json" --benchmark_out_format=json >"/tmp/ab/ab_${which}_$i.txt" 2>&1
    echo "$which $i: exit $? in $(( $(date +%s) - start )) s"
  done
done
tar czf "$OUT/ab.tgz" -C /tmp/ab .
echo "done at ${SECONDS}s"
ls "$OUT"
