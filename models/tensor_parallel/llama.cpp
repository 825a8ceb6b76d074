#include "models/tensor_parallel/llama.h"

#include "models/attention_backend.h"
#include "core/flat_tensors.h"

#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/scaled_dot_product_attention.h>

namespace parbench {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The shape one rank's shards are built in: a Llama of heads/w query heads, kv_heads/w kv heads,
// ffn/w feed-forward width and vocabulary/w tokens, at the whole model's width and head size.
LlamaConfig shard_config(const LlamaConfig& whole, int degree) {
  auto shard = whole;
  shard.head_dim = whole.head_size();
  shard.heads = whole.heads / degree;
  shard.kv_heads = whole.kv_heads / degree;
  shard.ffn = whole.ffn / degree;
  shard.vocabulary = whole.vocabulary / degree;
  return shard;
}

}  // namespace

ShardKind llama_shard_kind(const std::string& name) {
  if (ends_with(name, "embed_tokens.weight") || name == "lm_head.weight") return ShardKind::kRows;
  for (const char* column_parallel : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight",
                                      "up_proj.weight"}) {
    if (ends_with(name, column_parallel)) return ShardKind::kRows;
  }
  if (ends_with(name, "o_proj.weight") || ends_with(name, "down_proj.weight")) return ShardKind::kColumns;
  return ShardKind::kReplicated;
}

std::string llama_tensor_parallel_obstacle(const LlamaConfig& config, int degree, int64_t seq_len,
                                           bool sequence_parallel) {
  const auto ranks = std::to_string(degree) + (degree == 1 ? " rank" : " ranks");
  const auto must_divide = [&](int64_t count, const std::string& what) -> std::string {
    if (count % degree == 0) return "";
    return config.name + "'s " + std::to_string(count) + " " + what + " do not split over " + ranks +
           ": the degree must divide them";
  };
  for (const auto& reason : {must_divide(config.heads, "attention heads"), must_divide(config.kv_heads, "kv heads"),
                             must_divide(config.ffn, "feed-forward features"),
                             must_divide(config.vocabulary, "vocabulary entries")}) {
    if (!reason.empty()) return reason;
  }
  if (sequence_parallel && seq_len % degree != 0) {
    return "sequence parallel splits the " + std::to_string(seq_len) + " tokens of a sequence over " + ranks +
           ": the degree must divide --seq";
  }
  return "";
}

TensorParallelLlamaImpl::TensorParallelLlamaImpl(LlamaImpl& whole, TensorParallelGroup group, bool sequence_parallel)
    : config_(whole.config()), group_(group), sequence_parallel_(sequence_parallel) {
  set_checkpoint_blocks(whole.checkpoint_blocks());
  const auto obstacle = llama_tensor_parallel_obstacle(config_, group.degree, /*seq_len=*/0, false);
  TORCH_CHECK(obstacle.empty(), obstacle);
  const auto shape = shard_config(config_, group.degree);
  model = register_module("model", LlamaBody(shape, torch::kCPU));
  if (!config_.tied) lm_head = register_module("lm_head", LlamaLinear(shape.width, shape.vocabulary, torch::kCPU));

  torch::NoGradGuard no_grad;
  const auto shards = named_parameters();
  const auto sources = whole.named_parameters();
  TORCH_CHECK(shards.size() == sources.size(), "the tensor-parallel Llama has ", shards.size(),
              " parameters, the whole one ", sources.size());
  for (const auto& source : sources) {
    auto* shard = shards.find(source.key());
    TORCH_CHECK(shard != nullptr, "the tensor-parallel Llama has no parameter ", source.key());
    const auto kind = llama_shard_kind(source.key());
    const auto piece = take_shard(source.value(), kind, group_.rank, group_.degree);
    TORCH_CHECK(piece.sizes() == shard->sizes(), source.key(), "'s shard is ", piece.sizes(), ", its place ",
                shard->sizes());
    shard->copy_(piece);
    if (sequence_parallel_ && kind == ShardKind::kReplicated) sequence_split_.push_back(*shard);
  }
  // The rotary frequencies are buffers: the whole model's, copied.
  const auto whole_buffers = whole.named_buffers();
  for (auto& buffer : named_buffers()) {
    if (const auto* source = whole_buffers.find(buffer.key())) buffer.value().copy_(*source);
  }
}

std::vector<ShardKind> TensorParallelLlamaImpl::shard_kinds() {
  std::vector<ShardKind> kinds;
  for (const auto& item : named_parameters()) kinds.push_back(llama_shard_kind(item.key()));
  return kinds;
}

torch::Tensor TensorParallelLlamaImpl::embed(const torch::Tensor& tokens) {
  const auto sequence = tokens.t();  // (T, N): sequence-first
  const auto& weight = model->embed_tokens->weight;
  const auto local_vocabulary = weight.size(0);
  const auto local_tokens = sequence - group_.rank * local_vocabulary;
  const auto owned = local_tokens.ge(0).logical_and(local_tokens.lt(local_vocabulary));
  // Tokens another rank owns look up row 0 and are zeroed: the sum over ranks is the embedding.
  const auto partial = torch::nn::functional::embedding(local_tokens.clamp(0, local_vocabulary - 1), weight)
                           .masked_fill(owned.logical_not().unsqueeze(-1), 0.0);
  return leave_parallel_region(partial, group_, sequence_parallel_);
}

torch::Tensor TensorParallelLlamaImpl::block(LlamaBlock& layer, torch::Tensor x) {
  auto& attention = *layer->self_attn;
  const auto hd = config_.head_size();
  const auto local_heads = config_.heads / group_.degree, local_kv = config_.kv_heads / group_.degree;
  // q, k and v as one column-parallel layer: one gather of the input (sequence parallel) and one
  // reduction of its gradient, not three.
  const auto qkv_weight =
      torch::cat({attention.q_proj->weight, attention.k_proj->weight, attention.v_proj->weight}, 0);
  const auto qkv = column_parallel(layer->input_layernorm(x), qkv_weight, {}, group_, sequence_parallel_);
  const auto tokens = qkv.size(0), batch = qkv.size(1);
  const auto parts = qkv.split_with_sizes({local_heads * hd, local_kv * hd, local_kv * hd}, 2);
  // (T, N, heads, head size) to (N, heads, T, head size), as attention takes them.
  const auto as_heads = [&](const torch::Tensor& t, int64_t heads) {
    return t.view({tokens, batch, heads, hd}).permute({1, 2, 0, 3});
  };
  // The whole sequence, gathered: its tokens sit at positions 0, 1, ...
  const auto q = llama_rotary(as_heads(parts[0], local_heads), attention.inv_freq, 0);
  const auto k = llama_rotary(as_heads(parts[1], local_kv), attention.inv_freq, 0);
  const auto v = as_heads(parts[2], local_kv);
  const bool grouped = local_kv != local_heads;
  if (sdpa_backend_ < 0) {
    sdpa_backend_ = at::_fused_sdp_choice(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt, grouped);
  }
  const auto y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt, grouped);
  const auto merged = y.permute({2, 0, 1, 3}).reshape({tokens, batch, local_heads * hd});
  x = x + leave_parallel_region(rows_linear(merged, attention.o_proj->weight), group_, sequence_parallel_);

  auto& mlp = *layer->mlp;
  const auto gate_up = column_parallel(layer->post_attention_layernorm(x),
                                       torch::cat({mlp.gate_proj->weight, mlp.up_proj->weight}, 0), {}, group_,
                                       sequence_parallel_);
  const auto halves = gate_up.chunk(2, -1);
  const auto hidden = torch::silu(halves[0]) * halves[1];
  return x + leave_parallel_region(rows_linear(hidden, mlp.down_proj->weight), group_, sequence_parallel_);
}

torch::Tensor TensorParallelLlamaImpl::head(const torch::Tensor& x) {
  const auto& weight = config_.tied ? model->embed_tokens->weight : lm_head->weight;
  return column_parallel(model->norm(x), weight, {}, group_, sequence_parallel_);
}

std::vector<Stage> TensorParallelLlamaImpl::build_stages() {
  std::vector<Stage> stages;
  stages.push_back({"embed", {model->embed_tokens.ptr()}, [this](const torch::Tensor& tokens) { return embed(tokens); }});
  const auto names = llama_stage_names(config_);
  for (size_t layer = 0; layer < model->blocks.size(); ++layer) {
    auto each = model->blocks[layer];
    stages.push_back({names[layer + 1], {each.ptr()}, [this, each](const torch::Tensor& x) mutable { return block(each, x); },
                      /*block=*/true});
  }
  if (config_.tied) {
    stages.push_back({"head", {model->norm.ptr()}, [this](const torch::Tensor& x) { return head(x); }});
  } else {
    stages.push_back({"head", {model->norm.ptr(), lm_head.ptr()}, [this](const torch::Tensor& x) { return head(x); }});
  }
  return stages;
}

torch::Tensor TensorParallelLlamaImpl::forward(torch::Tensor tokens) {
  TORCH_CHECK(!sequence_parallel_ || tokens.size(1) % group_.degree == 0, "sequence parallel over ", group_.degree,
              " ranks needs a sequence length that divides by them, got ", tokens.size(1));
  AutocastScope autocast(tokens.device().type(), autocast_dtype());
  for (auto& stage : stages()) tokens = stage.forward(tokens);
  return tokens;
}

std::map<std::string, std::string> TensorParallelLlamaImpl::forward_facts() const {
  if (sdpa_backend_ < 0) return {};
  return {{"attention", sdpa_backend_name(sdpa_backend_)}};
}

void TensorParallelLlamaImpl::finish_gradients() {
  if (sequence_split_.empty()) return;
  std::vector<torch::Tensor> gradients;
  for (const auto& parameter : sequence_split_) gradients.push_back(parameter.grad());
  torch::NoGradGuard no_grad;
  for (const auto& indices : indices_by_dtype(gradients)) {
    auto flat = concatenated(gradients, indices);
    all_reduce_sum_in_place(flat, group_);
    const auto parts = split_like(flat, gradients, indices);
    for (size_t k = 0; k < indices.size(); ++k) gradients[indices[k]].copy_(parts[k]);
  }
}

namespace {

TensorParallelPlan llama_plan() {
  TensorParallelPlan plan;
  plan.family = "Llama";
  plan.covers = [](const std::string& model) { return find_llama_config(model) != nullptr; };
  plan.obstacle = [](const std::string& model, int degree, int64_t seq_len, bool sequence_parallel) {
    return llama_tensor_parallel_obstacle(*find_llama_config(model), degree, seq_len, sequence_parallel);
  };
  plan.shard_kind = llama_shard_kind;
  plan.width = [](const std::string& model) { return find_llama_config(model)->width; };
  plan.shard = [](StagedModel& whole, const TensorParallelGroup& group, bool sequence_parallel) {
    auto* llama = dynamic_cast<LlamaImpl*>(&whole.module());
    TORCH_CHECK(llama != nullptr, whole.name(), " is not a Llama");
    return std::static_pointer_cast<TensorParallelModel>(
        std::make_shared<TensorParallelLlamaImpl>(*llama, group, sequence_parallel));
  };
  return plan;
}

PARBENCH_REGISTER_TENSOR_PARALLEL_PLAN(llama_plan());

}  // namespace
}  // namespace parbench
