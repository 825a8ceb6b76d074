#!/usr/bin/env bash
# Call G: NCCL's settings against the graphed tensor_parallel steps (sp on, halves off and on), and the traces brought back.
set -u
torch_lib=$(python3 -c "import os,torch;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export LD_LIBRARY_PATH="$torch_lib:$torch_lib/../../nvidia/cu13/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
bin=./.prebuilt/parbench
common=(--models=gpt2-medium --seq=1024 --batch=16 --precision=bf16 --optimizer=adamw --busy-profile=off --allreduce=off
        --sequence-parallel=on --tp-halves=off,on --cuda-graph=on)
mkdir -p /tmp/g/tr
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING timeout -k 5 120 $bin "${common[@]}" --strategies=tensor_parallel --trace=/tmp/g/tr \
  --repetitions=1 --iterations=3 --benchmark_min_time=0.1 > /tmp/g/trace_run.txt 2>&1; echo "trace run: exit $? at ${SECONDS}s"
for f in /tmp/g/tr/*rank0.trace.json; do python3 .prebuilt/overlap.py "$f"; done
tar czf "$OUT/traces.tgz" -C /tmp/g/tr .
for v in simple ll128 ch32 simple_conn1 plain; do
  envs=(PARBENCH_UNUSED=1)
  case $v in
    simple) envs+=(NCCL_PROTO=Simple) ;;
    ll128) envs+=(NCCL_PROTO=LL128) ;;
    ch32) envs+=(NCCL_MIN_NCHANNELS=32) ;;
    simple_conn1) envs+=(NCCL_PROTO=Simple CUDA_DEVICE_MAX_CONNECTIONS=1) ;;
  esac
  strategies=tensor_parallel; [[ $v == plain ]] && strategies=single,tensor_parallel
  env "${envs[@]}" timeout -k 5 100 $bin "${common[@]}" --strategies=$strategies --repetitions=3 --benchmark_min_time=0.2 \
    --benchmark_out=/tmp/g/$v.json --benchmark_out_format=json > /tmp/g/$v.txt 2>&1
  echo "== $v (${envs[*]}): exit $? at ${SECONDS}s"; grep -E "^  (single|tensor_parallel)" /tmp/g/$v.txt | head -3
done
tar czf "$OUT/g.tgz" -C /tmp/g --exclude=./tr .
echo "done at ${SECONDS}s"
