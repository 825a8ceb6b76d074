#!/usr/bin/env bash
# Same-call A/B: bf7d794 (baseline) against f169f7a (the collective lane), zero stages 2-3 and ddp, eager.
set -u
torch_lib=$(python3 -c "import os,torch;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export LD_LIBRARY_PATH="$torch_lib:$torch_lib/../../nvidia/cu13/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
args=(--models=gpt2-medium --seq=1024 --batch=16 --precision=bf16 --optimizer=adamw --busy-profile=off
      --strategies=ddp,zero --zero-stages=2,3 --cuda-graph=off --allreduce=off --repetitions=3 --benchmark_min_time=0.2)
for i in 1 2; do
  for which in baseline current; do
    bin=./.prebuilt/parbench; [[ $which == baseline ]] && bin=./.prebuilt/baseline/parbench
    start=$(date +%s)
    timeout -k 5 120 "$bin" "${args[@]}" --benchmark_out="$OUT/ab_${which}_$i.json" --benchmark_out_format=json >"$OUT/ab_${which}_$i.txt" 2>&1
    echo "$which $i: exit $? in $(( $(date +%s) - start )) s"
  done
done
