#include "models/token_cross_entropy.h"

#include <algorithm>

namespace parbench {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows [begin, end) of `rows` in chunks of at most `chunk_elements` elements (at least one row).
template <class Body>
void for_each_row_chunk(int64_t rows, int64_t columns, int64_t chunk_elements, const Body& body) {
  const int64_t step = std::max<int64_t>(1, chunk_elements / std::max<int64_t>(1, columns));
  for (int64_t begin = 0; begin < rows; begin += step) body(begin, std::min(rows, begin + step));
}

struct TokenCrossEntropy : torch::autograd::Function<TokenCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets,
                               int64_t chunk_elements) {
    ctx->saved_data["chunk"] = chunk_elements;
    const auto log_sum_exp = row_log_sum_exp(logits, chunk_elements);
    const auto target_logits = logits.gather(1, targets.unsqueeze(1)).squeeze(1).to(torch::kFloat32);
    ctx->save_for_backward({logits, targets, log_sum_exp});
    return (log_sum_exp - target_logits).mean();
  }

  static variable_list backward(AutogradContext* ctx, variable_list gradients) {
    const auto saved = ctx->get_saved_variables();
    // d(mean loss)/d(logit) = (softmax - one-hot) / tokens, times the incoming gradient.
    const auto scale = gradients[0].to(torch::kFloat32) / static_cast<double>(saved[0].size(0));
    return {softmax_minus_one_hot(saved[0], saved[2], saved[1], {}, scale, ctx->saved_data["chunk"].toInt()),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor row_log_sum_exp(const torch::Tensor& logits, int64_t chunk_elements) {
  const auto rows = logits.size(0);
  auto log_sum_exp = torch::empty({rows}, logits.options().dtype(torch::kFloat32));
  for_each_row_chunk(rows, logits.size(1), chunk_elements, [&](int64_t begin, int64_t end) {
    log_sum_exp.slice(0, begin, end).copy_(at::logsumexp(logits.slice(0, begin, end).to(torch::kFloat32), {1}));
  });
  return log_sum_exp;
}

torch::Tensor softmax_minus_one_hot(const torch::Tensor& logits, const torch::Tensor& log_sum_exp,
                                    const torch::Tensor& targets, const torch::Tensor& target_weights,
                                    const torch::Tensor& scale, int64_t chunk_elements) {
  auto gradient = torch::empty_like(logits, torch::MemoryFormat::Contiguous);
  for_each_row_chunk(logits.size(0), logits.size(1), chunk_elements, [&](int64_t begin, int64_t end) {
    // A copy even of fp32 logits: they are saved, and the chunk is worked on in place.
    auto softmax = logits.slice(0, begin, end)
                       .to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true)
                       .sub_(log_sum_exp.slice(0, begin, end).unsqueeze(1))
                       .exp_();
    const auto minus_one = target_weights.defined()
                               ? target_weights.slice(0, begin, end).neg().unsqueeze(1)
                               : torch::full({end - begin, 1}, -1.0, softmax.options());
    softmax.scatter_add_(1, targets.slice(0, begin, end).unsqueeze(1), minus_one);
    gradient.slice(0, begin, end).copy_(softmax.mul_(scale));
  });
  return gradient;
}

torch::Tensor token_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t chunk_elements) {
  TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "token_cross_entropy takes (tokens, vocabulary) logits and (tokens) targets, got ", logits.sizes(),
              " and ", targets.sizes());
  TORCH_CHECK(chunk_elements > 0, "token_cross_entropy: chunks need at least one element, got ", chunk_elements);
  return TokenCrossEntropy::apply(logits, targets, chunk_elements);
}

}  // namespace parbench
