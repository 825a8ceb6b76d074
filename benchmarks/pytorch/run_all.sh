#!/usr/bin/env bash
# Runs every PyTorch baseline into OUT_DIR, one JSON per baseline (docs/JSON.md, "PyTorch
# baselines"), each under its own timeout; a baseline that fails or times out is reported and the
# rest still run. About 2.5 minutes on 2 H100s or H200s for the default sets.
#
#   benchmarks/pytorch/run_all.sh [--cpu] [--dry-run] OUT_DIR [SET...]
#
# SETs (default: resnet gpt):
#   resnet           ResNet-50 128x128 batch 120 fp32: the tutorial's single, ModelParallelResNet50 and
#                    PipelineParallelResNet50 (split 20); single in a CUDA graph; nn.DataParallel at
#                    global batch 120 and 240; DDP 2 ranks x 120 (weak); pipelining GPipe, 1F1B and
#                    interleaved 1F1B at split 20 (6 micro-batches)
#   tutorial-method  the tutorial's three models timed as the tutorial did (parbench --preset=tutorial)
#   gpt              gpt2-medium bf16 seq 1024 batch 16: single eager and CUDA-graphed; pipelining's
#                    three schedules at GPT_SPLITS
#   gpt-compile      gpt2-medium single under torch.compile (compiling takes a minute or more: not
#                    in the default sets, and capped by COMPILE_TIMEOUT)
#   mesh             fsdp_tp.py on NPROC ranks: llama3-8b seq 8192 batch 2 per replica, bf16, AdamW,
#                    checkpointed blocks, on MESH (default dp<NPROC/2>.tp2, dp<NPROC> for an odd NPROC;
#                    4 GPUs for the 2-D mesh), sequence parallelism MESH_SP (default on); gpt-2.7b seq 2048 batch MESH_GPT_BATCH, bf16, AdamW,
#                    FSDP2 alone (dp<NPROC>), resharding after forward on and off. Not in the default
#                    sets; capped by MESH_TIMEOUT
# --cpu: tiny shapes on the CPU (gloo), to exercise the scripts; --dry-run: print the commands only.
#
# Environment (all optional): PYTHON (default python3), NPROC (ranks; default 2), TIMEOUT (seconds
# per baseline, default 150), COMPILE_TIMEOUT (default 240), RESNET_PRECISIONS (default fp32),
# RESNET_IMAGE (default 128), RESNET_BATCH (default 120; data_parallel runs it and twice it),
# GPT_SPLITS (default 4), RESNET_SPLITS (default 20), GPT_CUT and GPT_INTERLEAVED_CUT (parbench's
# label `cut` of the matching cases), PARBENCH_JSON (parbench's JSON of the same call: pipelining
# then takes each cut from its matching case's label where GPT_CUT and GPT_INTERLEAVED_CUT are not
# given; default: the blocks in equal parts), PARBENCH_GIT_SHA, ONLY (comma-separated baseline names,
# e.g. ONLY=single_resnet_graph,data_parallel: only those of the sets run), MESH, MESH_GPT_BATCH
# (default 4), MESH_SP (default on), MESH_TIMEOUT (default 600).
# Exit status: 0 all ran, 1 some failed (listed on stderr and in OUT_DIR/status.tsv), 2 bad input.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cpu=0
dry_run=0
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --cpu) cpu=1 ;;
    --dry-run) dry_run=1 ;;
    *) echo "run_all.sh: error: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [[ $# -lt 1 ]]; then
  echo "usage: run_all.sh [--cpu] [--dry-run] OUT_DIR [resnet|tutorial-method|gpt|gpt-compile|mesh ...]" >&2
  exit 2
fi
out_dir=$1
shift
sets=("$@")
[[ ${#sets[@]} -eq 0 ]] && sets=(resnet gpt)
for set in "${sets[@]}"; do
  case $set in
    resnet|tutorial-method|gpt|gpt-compile|mesh) ;;
    *) echo "run_all.sh: error: unknown set '$set' (resnet, tutorial-method, gpt, gpt-compile, mesh)" >&2; exit 2 ;;
  esac
done

python=${PYTHON:-python3}
# The measured shapes need GPUs: without one every baseline would fail on its own, each saying to
# pass the scripts' --device=cpu, which this script does not take: it says so once, up front.
if [[ $cpu == 0 && $dry_run == 0 ]] &&
   [[ $("$python" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null) == 0 ]]; then
  echo "run_all.sh: error: no GPU visible: the baselines' shapes are sized for GPUs (--cpu runs tiny shapes on the CPU)" >&2
  exit 2
fi

# NVLink multicast stays off, as parbench sets it (docs/JSON.md, environment_set_by_parbench).
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1}
export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
nproc=${NPROC:-2}
timeout_s=${TIMEOUT:-150}
compile_timeout_s=${COMPILE_TIMEOUT:-240}
resnet_precisions=${RESNET_PRECISIONS:-fp32}
resnet_image=${RESNET_IMAGE:-128}
resnet_batch=${RESNET_BATCH:-120}
gpt_splits=${GPT_SPLITS:-4}
resnet_splits=${RESNET_SPLITS:-20}
mesh_timeout_s=${MESH_TIMEOUT:-600}
if [[ -n ${MESH:-} ]]; then
  mesh=$MESH
elif ((nproc % 2 == 0)); then
  mesh=dp$((nproc / 2)).tp2
else
  mesh=dp$nproc
fi
if [[ -z ${PARBENCH_GIT_SHA:-} ]]; then
  PARBENCH_GIT_SHA=$(git -C "$here" rev-parse HEAD 2>/dev/null || echo unknown)
  export PARBENCH_GIT_SHA
fi

# Shapes: the measured ones, or tiny ones on the CPU.
if [[ $cpu == 1 ]]; then
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  resnet=(--device cpu --model resnet-tiny --image 32 --batch 4 --precision "$resnet_precisions"
          --warmup 1 --steps 2 --repetitions 2)
  gpt=(--device cpu --model tinygpt --seq 16 --batch 4 --precision bf16 --warmup 1 --steps 2 --repetitions 2)
  resnet_splits=2
  gpt_splits=2
  dp_batches=4,8
  mesh_llama=(--device cpu --model tinyllama --seq 16 --batch 2 --precision bf16 --optimizer adamw --checkpoint blocks
              --warmup 1 --steps 2 --repetitions 2)
  mesh_gpt=(--device cpu --model tinygpt --seq 16 --batch 2 --precision bf16 --optimizer adamw
            --warmup 1 --steps 2 --repetitions 2)
else
  resnet=(--model resnet50 --image "$resnet_image" --batch "$resnet_batch" --precision "$resnet_precisions")
  # gpt2-medium steps take ~0.1 s: fewer of them.
  gpt=(--model gpt2-medium --seq 1024 --batch 16 --precision bf16 --warmup 3 --steps 5 --repetitions 3)
  dp_batches=$resnet_batch,$((resnet_batch * 2))
  # A llama3-8b step at 8192 tokens takes seconds: few of them.
  mesh_llama=(--model llama3-8b --seq 8192 --batch 2 --precision bf16 --optimizer adamw --checkpoint blocks
              --warmup 2 --steps 3 --repetitions 3)
  mesh_gpt=(--model gpt-2.7b --seq 2048 --batch "${MESH_GPT_BATCH:-4}" --precision bf16 --optimizer adamw
            --warmup 3 --steps 5 --repetitions 3)
fi
gpt_cuts=()
[[ -n ${GPT_CUT:-} ]] && gpt_cuts+=(--cut "$GPT_CUT")
[[ -n ${GPT_INTERLEAVED_CUT:-} ]] && gpt_cuts+=(--interleaved-cut "$GPT_INTERLEAVED_CUT")
cuts_from=()
if [[ -n ${PARBENCH_JSON:-} ]]; then
  if [[ -f $PARBENCH_JSON ]]; then
    cuts_from=(--cuts-from "$PARBENCH_JSON")
  else
    echo "run_all.sh: note: PARBENCH_JSON=$PARBENCH_JSON is not a file; pipelining uses its default cuts" >&2
  fi
fi
torchrun=("$python" -m torch.distributed.run --standalone --nproc-per-node="$nproc")

[[ $dry_run == 1 ]] || mkdir -p "$out_dir/logs" || exit 2
status_file=$out_dir/status.tsv
[[ $dry_run == 1 ]] || printf 'baseline\tstatus\tseconds\n' >"$status_file"
failed=()
ran=0

# run NAME TIMEOUT COMMAND...: the baseline's JSON is OUT_DIR/NAME.json, its output OUT_DIR/logs/NAME.log.
run() {
  local name=$1 limit=$2
  shift 2
  # ONLY=name,name: just those baselines of the sets (a rerun of some, beside their parbench cases).
  [[ -n ${ONLY:-} && ,$ONLY, != *,$name,* ]] && return
  if [[ $dry_run == 1 ]]; then
    printf '%s:' "$name"; printf ' %q' timeout "$limit" "$@" --out "$out_dir/$name.json"; printf '\n'
    return
  fi
  echo "run_all.sh: $name (at most ${limit}s)" >&2
  local began=$SECONDS rc
  timeout --kill-after=10 "$limit" "$@" --out "$out_dir/$name.json" >"$out_dir/logs/$name.log" 2>&1
  rc=$?
  local took=$((SECONDS - began)) outcome=ok
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    outcome="timed out after ${limit}s"
  elif [[ $rc -ne 0 ]]; then
    outcome="failed (exit $rc)"
  fi
  # Each result's line (and a failure's last lines) on stderr, so the caller's log shows them.
  grep -E '^  pytorch/' "$out_dir/logs/$name.log" >&2
  ran=$((ran + 1))
  printf '%s\t%s\t%s\n' "$name" "$outcome" "$took" >>"$status_file"
  if [[ $outcome != ok ]]; then
    failed+=("$name: $outcome")
    tail -n 5 "$out_dir/logs/$name.log" | sed 's/^/    /' >&2
  fi
}

for set in "${sets[@]}"; do
  case $set in
    resnet)
      run tutorial "$timeout_s" "$python" "$here/tutorial.py" "${resnet[@]}" --split-sizes "$resnet_splits"
      run single_resnet_graph "$timeout_s" "$python" "$here/single.py" "${resnet[@]}" --variants graph
      run data_parallel "$timeout_s" "$python" "$here/data_parallel.py" "${resnet[@]}" --batch "$dp_batches" \
        --gpus "$nproc"
      run ddp "$timeout_s" "${torchrun[@]}" "$here/ddp.py" "${resnet[@]}"
      run pipelining_resnet "$timeout_s" "${torchrun[@]}" "$here/pipelining.py" "${resnet[@]}" \
        --split-sizes "$resnet_splits" "${cuts_from[@]}"
      ;;
    tutorial-method)
      run tutorial_method "$timeout_s" "$python" "$here/tutorial.py" "${resnet[@]}" --method tutorial \
        --split-sizes "$resnet_splits"
      ;;
    gpt)
      run single_gpt "$timeout_s" "$python" "$here/single.py" "${gpt[@]}" --variants eager,graph
      run pipelining_gpt "$timeout_s" "${torchrun[@]}" "$here/pipelining.py" "${gpt[@]}" \
        --split-sizes "$gpt_splits" "${gpt_cuts[@]}" "${cuts_from[@]}"
      ;;
    gpt-compile)
      run single_gpt_compile "$compile_timeout_s" "$python" "$here/single.py" "${gpt[@]}" --variants compile
      ;;
    mesh)
      run fsdp_tp_llama "$mesh_timeout_s" "${torchrun[@]}" "$here/fsdp_tp.py" "${mesh_llama[@]}" --mesh "$mesh" \
        --sequence-parallel "${MESH_SP:-on}"
      for reshard in on off; do
        run "fsdp_gpt_reshard_$reshard" "$mesh_timeout_s" "${torchrun[@]}" "$here/fsdp_tp.py" "${mesh_gpt[@]}" \
          --mesh "dp$nproc" --reshard-after-forward "$reshard"
      done
      ;;
  esac
done

[[ $dry_run == 1 ]] && exit 0
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "run_all.sh: $((ran - ${#failed[@]})) of $ran baselines ran; failed: $(IFS=';'; echo "${failed[*]}")" >&2
  echo "run_all.sh: results in $out_dir (status.tsv, logs/)" >&2
  exit 1
fi
echo "run_all.sh: $ran of $ran baselines ran; results in $out_dir" >&2
