#!/usr/bin/env bash
# Call I: the graphed halves step (sp on), two communicators: turns (committed) against one collective a step (variant, uncommitted),
# and NCCL's CTAs capped at 8 and 16; single graphed and the whole batch beside the plain run.
set -u
torch_lib=$(python3 -c "import os,torch;print(os.path.join(os.path.dirname(torch.__file__),'lib'))")
export LD_LIBRARY_PATH="$torch_lib:$torch_lib/../../nvidia/cu13/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
common=(--models=gpt2-medium --seq=1024 --batch=16 --precision=bf16 --optimizer=adamw --busy-profile=off --allreduce=off
        --sequence-parallel=on --cuda-graph=on --repetitions=3 --benchmark_min_time=0.2)
mkdir -p /tmp/i
run() { # name binary env... -- args...
  local name=$1 bin=$2; shift 2
  local envs=(PARBENCH_UNUSED=1); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout -k 5 100 "$bin" "${common[@]}" "$@" --benchmark_out=/tmp/i/$name.json --benchmark_out_format=json > /tmp/i/$name.txt 2>&1
  echo "== $name (${envs[*]}): exit $? at ${SECONDS}s"; grep -E "^  (single|tensor_parallel)" /tmp/i/$name.txt | head -3
}
run plain ./.prebuilt/parbench -- --strategies=single,tensor_parallel --tp-halves=off,on
run variant ./.prebuilt/variant/parbench -- --strategies=tensor_parallel --tp-halves=on
run ctas8 ./.prebuilt/parbench NCCL_MAX_CTAS=8 -- --strategies=tensor_parallel --tp-halves=on
run ctas16 ./.prebuilt/parbench NCCL_MAX_CTAS=16 -- --strategies=tensor_parallel --tp-halves=on
run variant_ctas16 ./.prebuilt/variant/parbench NCCL_MAX_CTAS=16 -- --strategies=tensor_parallel --tp-halves=on
tar czf "$OUT/i.tgz" -C /tmp/i .
echo "done at ${SECONDS}s"
