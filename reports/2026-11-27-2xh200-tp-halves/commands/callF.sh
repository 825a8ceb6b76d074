#!/usr/bin/env bash
# Call F: why the halves hide no communication. Traces of the graphed tensor_parallel steps (sp on, halves off and on)
# and where NCCL's kernels ran; then the graphed cases under CUDA_DEVICE_MAX_CONNECTIONS=1 and a high-priority NCCL stream.
set -u
torch_lib=$(python3 -c "import os,torch;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export LD_LIBRARY_PATH="$torch_lib:$torch_lib/../../nvidia/cu13/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bin=./.prebuilt/parbench
common=(--models=gpt2-medium --seq=1024 --batch=16 --precision=bf16 --optimizer=adamw --busy-profile=off --allreduce=off
        --sequence-parallel=on --tp-halves=off,on --cuda-graph=on)
mkdir -p /tmp/f/tr
timeout -k 5 120 $bin "${common[@]}" --strategies=tensor_parallel --trace=/tmp/f/tr --repetitions=1 --iterations=3 \
  --benchmark_min_time=0.1 > /tmp/f/trace_run.txt 2>&1; echo "trace run: exit $? at ${SECONDS}s"
ls -la /tmp/f/tr | head
for f in /tmp/f/tr/*.trace.json; do python3 .prebuilt/overlap.py "$f"; python3 ci/kernel_time.py "$f" | head -14; done
for v in plain conn1 prio both; do
  envs=()
  [[ $v == conn1 || $v == both ]] && envs+=(CUDA_DEVICE_MAX_CONNECTIONS=1)
  [[ $v == prio || $v == both ]] && envs+=(PARBENCH_NCCL_HIGH_PRIORITY=1)
  strategies=tensor_parallel; [[ $v == plain ]] && strategies=single,tensor_parallel
  env "${envs[@]}" timeout -k 5 100 $bin "${common[@]}" --strategies=$strategies --repetitions=3 --benchmark_min_time=0.2 \
    --benchmark_out=/tmp/f/$v.json --benchmark_out_format=json > /tmp/f/$v.txt 2>&1
  echo "== $v (${envs[*]}): exit $? at ${SECONDS}s"; grep -E "^  (single|tensor_parallel)" /tmp/f/$v.txt | head -4
done
rm -rf /tmp/f/tr_small; tar czf "$OUT/f.tgz" -C /tmp/f --exclude=./tr . ; ls -la /tmp/f/tr > "$OUT/traces_ls.txt"
echo "done at ${SECONDS}s"
