#!/usr/bin/env bash
# Call M: issue 37's gpt2-medium prediction table (mem2_predict_gpt), then the eager single A/B (bf7d794 against main's head).
set -u
mkdir -p build; [ -e build/parbench ] || ln -sf "$PWD/.prebuilt/parbench" build/parbench
export PARBENCH_JSON_TO_OUT=0 PARBENCH_PREBUILT_DIR=.prebuilt
MEM2_TIMEOUT=470 timeout -k 5 480 bash ci/gpu-check.sh prebuilt mem2_predict_gpt 2>&1 | tail -3
mkdir -p /tmp/h; tar xzf "$OUT/results.tgz" -C /tmp/h; rm -f "$OUT/results.tgz"
cp /tmp/h/mem2_predict_gpt.json /tmp/h/mem2_predict_gpt.txt /tmp/h/mem2_predict_gpt.stderr "$OUT/" 2>/dev/null
echo "a/b at ${SECONDS}s"
torch_lib=$(python3 -c "import os,torch;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export LD_LIBRARY_PATH="$torch_lib:$torch_lib/../../nvidia/cu13/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
args=(--models=gpt2-medium --seq=1024 --batch=8 --precision=bf16 --optimizer=adamw --strategies=single --cuda-graph=off
      --busy-profile=off --repetitions=3 --benchmark_min_time=0.3)
mkdir -p /tmp/ab
for which in baseline current; do
  [[ $(( 590 - SECONDS )) -gt 40 ]] || break
  bin=./.prebuilt/parbench; [[ $which == baseline ]] && bin=./.prebuilt/baseline/parbench
  timeout -k 5 40 "$bin" "${args[@]}" --benchmark_out="/tmp/ab/ab_${which}.json" --benchmark_out_format=json >"/tmp/ab/ab_${which}.txt" 2>&1
  echo "$which: exit $?"; grep -E "_median" "/tmp/ab/ab_${which}.txt" | cut -c1-200
done
tar czf "$OUT/ab.tgz" -C /tmp ab
echo "done at ${SECONDS}s"
