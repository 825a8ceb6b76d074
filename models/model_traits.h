// What some models declare beside their registry entry (models/model_zoo.h), read by name without
// building the model: a transformer's shape for torchtitan's MFU (docs/METRICS.md), and weights
// that two of its stages share (a head tied to the token embedding), which strategies that place
// stages apart cannot split.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace parbench {

// A decoder-only transformer's shape, as torchtitan's FLOPs per token read it.
struct TransformerShape {
  double non_embedding_params = 0;  // every parameter but the token (and position) embeddings
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
};

// Declares (or replaces) `model`'s shape.
void declare_transformer_shape(const std::string& model, const TransformerShape& shape);
// The shape `model` declared, or nullopt.
std::optional<TransformerShape> transformer_shape(const std::string& model);

// torchtitan's training FLOPs per token: 6 x non-embedding parameters + 12 x layers x heads x
// head_dim x seq_len (the attention's two products, forward and backward, causal mask ignored).
double torchtitan_flops_per_token(const TransformerShape& shape, int64_t seq_len);

// The peak torchtitan divides by on an H100 or H200 (SXM) whatever the precision: 989 TFLOP/s,
// bf16 dense.
inline constexpr double kTorchtitanPeakFlops = 989e12;

// Declares that `model`'s stages share weights, `what` saying which (e.g. "its output head is its
// token embedding's weight").
void declare_shared_stage_weights(const std::string& model, const std::string& what);
// What `model` declared of its shared weights; "" where its stages own their weights.
std::string shared_stage_weights(const std::string& model);
// Why a strategy that `does` something to stages apart (e.g. "model_parallel places stages on
// separate devices") cannot run `model`; "" where its stages own their weights.
std::string shared_weights_obstacle(const std::string& model, const std::string& does);

}  // namespace parbench
