#!/usr/bin/env bash
# Call J: same-call A/B of the graphed halves step (gpt2-medium bf16 batch 16, sp on): session 11's (bc8374b: one communicator,
# one collective of each half a step) against the current one (two communicators, turns), two alternating pairs, single graphed first.
set -u
torch_lib=$(python3 -c "import os,torch;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export LD_LIBRARY_PATH="$torch_lib:$torch_lib/../../nvidia/cu13/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
common=(--models=gpt2-medium --seq=1024 --batch=16 --precision=bf16 --optimizer=adamw --busy-profile=off --allreduce=off
        --sequence-parallel=on --cuda-graph=on --repetitions=3 --benchmark_min_time=0.2)
mkdir -p /tmp/j
timeout -k 5 60 ./.prebuilt/parbench "${common[@]}" --strategies=single --benchmark_out=/tmp/j/single.json --benchmark_out_format=json > /tmp/j/single.txt 2>&1
echo "== single: exit $?"; grep -E "^  single" /tmp/j/single.txt | head -1
for i in 1 2; do
  for which in s11 current; do
    bin=./.prebuilt/parbench; [[ $which == s11 ]] && bin=./.prebuilt/s11/parbench
    timeout -k 5 80 $bin "${common[@]}" --strategies=tensor_parallel --tp-halves=on --benchmark_out=/tmp/j/${which}_$i.json \
      --benchmark_out_format=json > /tmp/j/${which}_$i.txt 2>&1
    echo "== $which $i: exit $? at ${SECONDS}s"; grep -E "^  tensor_parallel" /tmp/j/${which}_$i.txt | head -1
  done
done
tar czf "$OUT/j.tgz" -C /tmp/j .
echo "done at ${SECONDS}s"
