"""FSDP2 and tensor parallelism on a device mesh under torchrun, as torchtitan applies them to a
Llama: a (dp, tp) DeviceMesh; on the tp sub-mesh parallelize_module splits every block's q, k, v
and first feed-forward projections by columns (ColwiseParallel) and its output projections by rows
(RowwiseParallel), the token embedding and the head by vocabulary, with the loss computed on the
vocabulary shards (loss_parallel) and optionally sequence parallelism on the norms; then
fully_shard over the dp sub-mesh shards the embedding, each block, the final norm with the head,
and the root. The same script runs FSDP2 alone (--mesh=dpN) and tensor parallelism alone
(--mesh=tpN).

The batch rule is parbench's: --batch is one data-parallel replica's, every tp rank of a replica
trains on the same sequences, the global batch is batch x dp and tokens/s counts it. Timing as
ddp.py: every rank times each step after a barrier and a one-element all-reduce, a step's time is
the slowest rank's, a repetition the mean of its steps, the result the median repetition.

  torchrun --standalone --nproc-per-node=4 benchmarks/pytorch/fsdp_tp.py --model=llama3-8b --seq=8192 \\
      --batch=2 --precision=bf16 --optimizer=adamw --checkpoint=blocks --mesh=dp2.tp2 --out mesh.json
"""
from __future__ import annotations

import contextlib
import re
import sys

import torch
import torch.distributed as dist
from torch import nn
import torch.nn.functional as F

import baseline_common as bc
from baseline_models import Embed, Head, make_model
from ddp import combine, distributed_env, gather_times, init_distributed, line_up

BASELINE = "torch.distributed.fsdp.fully_shard + torch.distributed.tensor.parallel"
STRATEGY = "fsdp2_tp"


def parse_mesh(text: str) -> tuple[int, int]:
    """'dp2.tp2', 'tp4', 'dp4' -> (dp, tp); an axis left out has size 1."""
    sizes = {}
    for part in text.split("."):
        found = re.fullmatch(r"([a-z]+)(\d+)", part)
        if not found:
            raise bc.UsageError(f"--mesh={text}: '{part}' is not an axis and a size (dpN, tpN, dpA.tpB)")
        axis, size = found.group(1), int(found.group(2))
        if axis not in ("dp", "tp"):
            raise bc.UsageError(f"--mesh={text}: unknown axis '{axis}' (dp, tp)")
        if axis in sizes:
            raise bc.UsageError(f"--mesh={text}: axis '{axis}' given twice")
        if size < 1:
            raise bc.UsageError(f"--mesh={text}: axis '{axis}' has size 0")
        sizes[axis] = size
    return sizes.get("dp", 1), sizes.get("tp", 1)


def parse(argv):
    parser = bc.common_parser(__doc__.split("\n")[0], model_default="gpt2-medium")
    parser.add_argument("--mesh", required=True,
                        help="dpN (FSDP2 alone), tpN (tensor parallel alone) or dpA.tpB; the product is the "
                             "number of ranks")
    parser.add_argument("--sequence-parallel", choices=["on", "off"], default="off", nargs="?", const="on",
                        help="tp: the norms and residual adds on each rank's slice of the sequence; default off")
    parser.add_argument("--loss-parallel", choices=["on", "off"], default="on",
                        help="tp: the loss on each rank's vocabulary shard of the logits; default on")
    parser.add_argument("--reshard-after-forward", choices=["on", "off"], default="on",
                        help="dp: free the gathered parameters of the embedding and blocks after their forward "
                             "(gather again for backward); default on")
    parser.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd",
                        help="sgd (lr 1e-3) or adamw (lr 1e-3, weight decay 0.01, fused on GPUs); default sgd")
    parser.add_argument("--checkpoint", choices=["off", "blocks"], default="off",
                        help="blocks: activation checkpointing of every block; default off")
    parser.add_argument("--check-loss", action="store_true",
                        help="record each warm-up step's loss over the global batch in details.warmup_losses")
    parser.add_argument("--dist-timeout", type=bc.positive_int, default=120,
                        help="seconds a rank waits in a collective before failing; default 120")
    args = parser.parse_args(argv)
    bc.finish_args(args)
    if not bc.is_language_model(args.model):
        raise bc.UsageError(f"--model={args.model}: fsdp_tp.py trains the GPT and Llama models only")
    args.dp, args.tp = parse_mesh(args.mesh)
    check_tp(args)
    return args


def check_tp(args) -> None:
    """What the tp degree must divide, as parbench's tensor_parallel refuses: the heads (and kv
    heads), the feed-forward width and the vocabulary (equal shards), and with sequence parallelism
    the sequence."""
    config = bc.language_config(args.model)
    tp = args.tp
    sizes = {"heads": config["heads"], "vocabulary": config["vocabulary"],
             "feed-forward width": config.get("ffn", 4 * config["width"])}
    if "kv_heads" in config:
        sizes["kv heads"] = config["kv_heads"]
    for what, size in sizes.items():
        if size % tp:
            raise bc.UsageError(f"--mesh={args.mesh}: tp {tp} does not divide {args.model}'s {what} ({size})")
    if args.sequence_parallel == "on" and args.seq % tp:
        raise bc.UsageError(f"--mesh={args.mesh}: tp {tp} does not divide --seq={args.seq} (sequence parallelism "
                            "splits the sequence)")


def check_world(args, world: int) -> None:
    if args.dp * args.tp != world:
        raise bc.UsageError(f"--mesh={args.mesh} has {args.dp * args.tp} ranks, torchrun started {world}")


# --- the model as embedding, blocks and head ------------------------------------------------------

class GptTpAttention(nn.Module):
    """The GPT's attention with c_attn's q, k and v rows as three projections, so that a column shard
    holds whole heads of each (a column shard of the fused c_attn would hold q's heads alone). The
    heads a rank runs follow from its projections' width."""

    def __init__(self, attention):
        super().__init__()
        width = attention.width
        self.head_dim = width // attention.heads
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(width, width) for _ in range(3))
        with torch.no_grad():
            for i, proj in enumerate((self.q_proj, self.k_proj, self.v_proj)):
                proj.weight.copy_(attention.c_attn.weight[i * width:(i + 1) * width])
                proj.bias.copy_(attention.c_attn.bias[i * width:(i + 1) * width])
        self.c_proj = attention.c_proj

    def forward(self, x):
        batch, tokens, _ = x.shape
        q, k, v = (proj(x).view(batch, tokens, -1, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(batch, tokens, -1))


class Decoder(nn.Module):
    """The model's own modules as embed, blocks and head (the final norm and the output layer), the
    units parallelize_module and fully_shard take."""

    def __init__(self, model_name: str, model: nn.Module, split_qkv: bool):
        super().__init__()
        self.llama = bc.is_llama(model_name)
        if self.llama:
            self.embed, self.blocks = model.model.embed_tokens, model.model.layers
            self.head = Head(model.model.norm, model.lm_head)
            self.tied = model.tied
        else:
            self.embed, self.blocks = Embed(model.wte, model.wpe), model.h
            self.head = Head(model.ln_f, model.lm_head)
            self.tied = False
            if split_qkv:
                for block in self.blocks:
                    block.attn = GptTpAttention(block.attn)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def apply_tp(decoder: Decoder, tp_mesh, sequence_parallel: bool, loss_parallel: bool) -> None:
    """torchtitan's plan (torchtitan/models/llama3/infra/parallelize.py, apply_tp), with sequence
    parallelism optional: without it the norms stay whole on every rank and the row-parallel outputs
    are all-reduced (Replicate) rather than reduce-scattered (Shard(1))."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,
                                                   RowwiseParallel, SequenceParallel, parallelize_module)
    residual = Shard(1) if sequence_parallel else Replicate()
    plan = {"head.lm_head": ColwiseParallel(input_layouts=residual,
                                            output_layouts=Shard(-1) if loss_parallel else Replicate(),
                                            use_local_output=not loss_parallel)}
    if decoder.llama:
        plan["embed"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=residual)
    else:
        # The position embedding is added whole, after the vocabulary shards' sum, then each rank
        # keeps its slice of the sequence (a slice: no communication forward).
        plan["embed.wte"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())
        if sequence_parallel:
            plan["embed"] = PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(1))
    if sequence_parallel:
        plan["head.ln_f"] = SequenceParallel()
    parallelize_module(decoder, tp_mesh, plan)
    if decoder.tied:  # the head is the embedding's weight: both shards are by vocabulary (dim 0)
        decoder.head.lm_head.weight = decoder.embed.weight

    names = (("input_layernorm", "self_attn", ("q_proj", "k_proj", "v_proj"), "o_proj",
              "post_attention_layernorm", "mlp", ("gate_proj", "up_proj"), "down_proj") if decoder.llama else
             ("ln_1", "attn", ("q_proj", "k_proj", "v_proj"), "c_proj", "ln_2", "mlp", ("c_fc",), "c_proj"))
    norm1, attention, columns, out, norm2, mlp, mlp_columns, mlp_out = names
    for block in decoder.blocks:
        block_plan = {f"{attention}.{name}": ColwiseParallel() for name in columns}
        block_plan.update({f"{mlp}.{name}": ColwiseParallel() for name in mlp_columns})
        block_plan[f"{attention}.{out}"] = RowwiseParallel(output_layouts=residual)
        block_plan[f"{mlp}.{mlp_out}"] = RowwiseParallel(output_layouts=residual)
        if sequence_parallel:
            for norm, inner in ((norm1, attention), (norm2, mlp)):
                block_plan[norm] = SequenceParallel()
                block_plan[inner] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        parallelize_module(block, tp_mesh, block_plan)


def apply_checkpointing(decoder: Decoder) -> None:
    """Every block recomputed in backward (torchtitan's full activation checkpointing: PyTorch's
    non-reentrant checkpoint, which FSDP2 works with)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    for i, block in enumerate(decoder.blocks):
        decoder.blocks[i] = checkpoint_wrapper(block, preserve_rng_state=False)  # no dropout: no RNG to replay


def apply_fsdp(decoder: Decoder, dp_mesh, precision: str, reshard: bool) -> None:
    """torchtitan's apply_fsdp: the embedding, each block, then the final norm and head together
    (not resharded after forward: backward needs them at once), then the root. A tied head stays with
    the embedding in the root's group."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if precision == "bf16" else MixedPrecisionPolicy()
    if not decoder.tied:
        fully_shard(decoder.embed, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=reshard)
    for block in decoder.blocks:
        fully_shard(block, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=reshard)
    if not decoder.tied:
        fully_shard(decoder.head, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=False)
    fully_shard(decoder, mesh=dp_mesh, mp_policy=policy)


def make_optimizer(args, parameters, device):
    """SGD, or parbench's AdamW (PyTorch's defaults but lr 1e-3, weight decay 0.01) through the fused
    kernel on GPUs. DTensors and plain tensors in separate groups: a fused or foreach update refuses
    a mix, which tensor parallelism without FSDP leaves (the norms and the position embedding stay
    plain tensors, whole on every rank)."""
    parameters = list(parameters)
    groups = [{"params": [p for p in parameters if is_dtensor(p)]},
              {"params": [p for p in parameters if not is_dtensor(p)]}]
    groups = [group for group in groups if group["params"]]
    if args.optimizer == "sgd":
        return bc.make_sgd(groups)
    return torch.optim.AdamW(groups, lr=bc.LEARNING_RATE, weight_decay=0.01, fused=device.type == "cuda")


def is_dtensor(tensor) -> bool:
    from torch.distributed.tensor import DTensor
    return isinstance(tensor, DTensor)


# --- one case --------------------------------------------------------------------------------------

def describe(args, world, batch, precision):
    fields = {"model": args.model, "batch": batch, "seq": args.seq, "precision": precision, "data": "device",
              "optimizer": args.optimizer, "gpus": world, "mesh": args.mesh, "sp": args.sequence_parallel,
              "reshard": args.reshard_after_forward, "checkpoint": args.checkpoint, "graph": "off"}
    name = (f"pytorch/fsdp_tp/{args.model}/batch:{batch}/seq:{args.seq}/precision:{precision}/"
            f"optimizer:{args.optimizer}/gpus:{world}/mesh:{args.mesh}/sp:{args.sequence_parallel}/"
            f"reshard:{args.reshard_after_forward}/checkpoint:{args.checkpoint}")
    return name, fields


def build(args, device, mesh, precision):
    """The decoder on this rank, tensor-parallel, checkpointed and sharded as the options say, and
    the context its forward and backward run in."""
    torch.manual_seed(0)  # every rank builds the same whole model, then keeps its shards
    with device:
        model = make_model(args.model)
    model.train()
    decoder = Decoder(args.model, model, split_qkv=args.tp > 1)
    loss_parallel = args.tp > 1 and args.loss_parallel == "on"
    if args.tp > 1:
        apply_tp(decoder, mesh["tp"], args.sequence_parallel == "on", loss_parallel)
    if args.checkpoint == "blocks":
        apply_checkpointing(decoder)
    if args.dp > 1:
        apply_fsdp(decoder, mesh["dp"], precision, args.reshard_after_forward == "on")
        forward = decoder  # FSDP's policy casts the parameters to bf16; no autocast
    else:  # no FSDP to cast (torchtitan's tp-only runs): autocast, as parbench and single.py do
        forward = bc.Autocast(decoder, bc.autocast_dtype(precision), device.type)

    def context():
        if not loss_parallel:
            return contextlib.nullcontext()
        from torch.distributed.tensor.parallel import loss_parallel as loss_parallel_context
        return loss_parallel_context()
    return decoder, forward, context


def run_case(args, world, device, mesh, batch, precision):
    name, fields = describe(args, world, batch, precision)
    global_batch = batch * args.dp
    decoder, forward, context = build(args, device, mesh, precision)
    optimizer = make_optimizer(args, decoder.parameters(), device)
    # The global batch drawn alike on every rank; replica r trains on its rows r*batch .. (r+1)*batch.
    torch.manual_seed(1000)
    inputs, targets = bc.make_batch(args, global_batch, precision, "cpu", "cpu")
    replica = mesh["dp"].get_local_rank()
    rows = slice(replica * batch, (replica + 1) * batch)
    inputs, targets = inputs[rows].to(device), targets[rows].to(device)
    bc.free_cuda_memory()
    bc.reset_peak_memory([device])  # from here: the whole model each rank built first is gone

    def step():
        optimizer.zero_grad(set_to_none=True)
        with context():
            loss = bc.compute_loss(forward(inputs), targets)
            loss.backward()
        optimizer.step()
        return loss

    warmup_losses = []
    for _ in range(args.warmup):
        loss = step()
        if args.check_loss:
            warmup_losses.append(global_loss(loss, mesh))
    bc.synchronize([device])
    timer = bc.StepTimer([device], "event")
    start = line_up(device)
    times = []
    for _ in range(args.repetitions):
        steps = []
        for _ in range(args.steps):
            dist.barrier()
            steps.append(timer.time(step, start))
        times.append(steps)
    gathered = gather_times(times, bc.peak_memory_gib([device]))
    repetitions, rank_spread, rank_medians = combine(gathered)
    peaks = {str(r): next(iter(g["peak"].values())) for r, g in enumerate(gathered) if g["peak"]}
    details = {"backend": dist.get_backend(), "step_ms_rank_spread": rank_spread, "rank_median_step_ms": rank_medians,
               "dp": args.dp, "tp": args.tp, "global_batch": global_batch,
               "loss_parallel": "on" if args.tp > 1 and args.loss_parallel == "on" else "off",
               "bf16_by": "none" if precision != "bf16" else ("fsdp_mixed_precision" if args.dp > 1 else "autocast")}
    if args.check_loss:
        details["warmup_losses"] = warmup_losses
    del decoder, forward, optimizer
    bc.free_cuda_memory()
    return bc.result(name, BASELINE, STRATEGY, "eager", fields, "event", repetitions, global_batch, args,
                     devices=[device], flops=bc.forward_flops_per_sample(args), gpus_used=world, peak_mem=peaks,
                     details=details)


def global_loss(loss, mesh) -> float:
    """The mean loss over the global batch: each replica's mean, averaged over dp (equal batches)."""
    value = loss.detach()
    if is_dtensor(value):  # loss_parallel's loss is a replicated DTensor
        value = value.full_tensor()
    value = value.float().clone()
    if mesh["dp"].size() > 1:
        dist.all_reduce(value, group=mesh["dp"].get_group())
        value /= mesh["dp"].size()
    return value.item()


def main(argv) -> int:
    args = parse(argv)
    _, world, _ = distributed_env()
    check_world(args, world)  # before any rank waits on the others
    rank, world, device = init_distributed(args)
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh(device.type, (args.dp, args.tp), mesh_dim_names=("dp", "tp"))
    results, status = [], 0
    ctx = bc.context(args.device, "event", world)
    try:
        for batch in args.batch:
            for precision in args.precision:
                try:
                    results.append(run_case(args, world, device, mesh, batch, precision))
                except Exception as error:
                    # A rank that fails leaves the others in a collective: record it, end the run.
                    name, fields = describe(args, world, batch, precision)
                    results.append(bc.result(name, BASELINE, STRATEGY, "eager", fields, "event", None,
                                             batch * args.dp, args, error=f"rank {rank}: {bc.first_line(error)}"))
                    status = 1
                if rank == 0:
                    bc.report(results[-1])
                    bc.write_document(args.out, ctx, results)
                if status:
                    print(f"fsdp_tp.py: rank {rank}: {results[-1]['error']}", file=sys.stderr)
                    return status
    finally:
        if status == 0:
            dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(bc.main_wrapper(main))
