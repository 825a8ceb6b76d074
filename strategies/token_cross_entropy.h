// A language model's next-token cross-entropy, mean over tokens, that never materialises the
// logits in fp32: the row-wise log-sum-exp is computed in chunks of rows (each chunk cast to fp32
// on its own), only the logits as they came (bf16 under autocast), the targets and one fp32
// value per token are saved, and the backward writes softmax - one-hot chunk by chunk straight
// into a gradient of the logits' dtype. The fused and chunked cross-entropies practitioners use
// (Apex's xentropy, Liger's) do the same; PyTorch's cross_entropy under autocast keeps the fp32
// logits and their log-softmax, three times the logits' bf16 bytes, alive into the backward.
#pragma once

#include <torch/torch.h>

#include <algorithm>

namespace parbench {

// Rows of at most this many fp32 elements are cast at a time (64 Mi elements: 256 MiB).
inline constexpr int64_t kCrossEntropyChunkElements = int64_t{1} << 26;

// logits (tokens, vocabulary), any floating dtype; targets (tokens), int64. Differentiable in
// logits. Equal to torch::nn::functional::cross_entropy(logits.to(kFloat32), targets) up to fp32
// rounding. `chunk_elements`: tests make chunks small.
torch::Tensor token_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                  int64_t chunk_elements = kCrossEntropyChunkElements);

// Rows [begin, end) of `rows` in chunks of at most `chunk_elements` elements (at least one row).
template <class Body>
void for_each_row_chunk(int64_t rows, int64_t columns, int64_t chunk_elements, const Body& body) {
  const int64_t step = std::max<int64_t>(1, chunk_elements / std::max<int64_t>(1, columns));
  for (int64_t begin = 0; begin < rows; begin += step) body(begin, std::min(rows, begin + step));
}

}  // namespace parbench
