// A language model's next-token cross-entropy, mean over tokens, that never materialises the
// logits in fp32: the row-wise log-sum-exp is computed in chunks of rows (each chunk cast to fp32
// on its own), only the logits as they came (bf16 under autocast), the targets and one fp32
// value per token are saved, and the backward writes softmax - one-hot chunk by chunk straight
// into a gradient of the logits' dtype. The fused and chunked cross-entropies practitioners use
// (Apex's xentropy, Liger's) do the same; PyTorch's cross_entropy under autocast keeps the fp32
// logits and their log-softmax, three times the logits' bf16 bytes, alive into the backward.
#pragma once

#include <torch/torch.h>

namespace parbench {

// Rows of at most this many fp32 elements are cast at a time (64 Mi elements: 256 MiB).
inline constexpr int64_t kCrossEntropyChunkElements = int64_t{1} << 26;

// logits (tokens, vocabulary), any floating dtype; targets (tokens), int64. Differentiable in
// logits. Equal to torch::nn::functional::cross_entropy(logits.to(kFloat32), targets) up to fp32
// rounding. `chunk_elements`: tests make chunks small.
torch::Tensor token_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                  int64_t chunk_elements = kCrossEntropyChunkElements);

// The pieces, shared with tensor_parallel's vocabulary-parallel cross-entropy:
// each row's log-sum-exp of `logits` (tokens, columns), in fp32, chunk by chunk;
torch::Tensor row_log_sum_exp(const torch::Tensor& logits, int64_t chunk_elements = kCrossEntropyChunkElements);
// (exp(logits - log_sum_exp) - one-hot at `targets`, weighted per row by `target_weights` (fp32;
// undefined: 1)) * `scale`, in the logits' dtype, chunk by chunk: the gradient of a mean
// cross-entropy whose softmax denominators are exp(log_sum_exp).
torch::Tensor softmax_minus_one_hot(const torch::Tensor& logits, const torch::Tensor& log_sum_exp,
                                    const torch::Tensor& targets, const torch::Tensor& target_weights,
                                    const torch::Tensor& scale, int64_t chunk_elements = kCrossEntropyChunkElements);

}  // namespace parbench
