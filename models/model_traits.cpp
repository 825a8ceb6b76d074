#include "models/model_traits.h"

#include <map>
#include <mutex>

namespace parbench {
namespace {

struct Traits {
  std::mutex mutex;
  std::map<std::string, TransformerShape> shapes;
  std::map<std::string, std::string> shared_weights;
};

// A function-local static, so declarations from other files' static initialisers are safe.
Traits& traits() {
  static Traits instance;
  return instance;
}

}  // namespace

void declare_transformer_shape(const std::string& model, const TransformerShape& shape) {
  auto& all = traits();
  std::lock_guard<std::mutex> lock(all.mutex);
  all.shapes[model] = shape;
}

std::optional<TransformerShape> transformer_shape(const std::string& model) {
  auto& all = traits();
  std::lock_guard<std::mutex> lock(all.mutex);
  const auto found = all.shapes.find(model);
  if (found == all.shapes.end()) return std::nullopt;
  return found->second;
}

double torchtitan_flops_per_token(const TransformerShape& shape, int64_t seq_len) {
  return 6.0 * shape.non_embedding_params + 12.0 * static_cast<double>(shape.layers) *
                                                static_cast<double>(shape.heads) *
                                                static_cast<double>(shape.head_dim) * static_cast<double>(seq_len);
}

void declare_shared_stage_weights(const std::string& model, const std::string& what) {
  auto& all = traits();
  std::lock_guard<std::mutex> lock(all.mutex);
  all.shared_weights[model] = what;
}

std::string shared_stage_weights(const std::string& model) {
  auto& all = traits();
  std::lock_guard<std::mutex> lock(all.mutex);
  const auto found = all.shared_weights.find(model);
  return found == all.shared_weights.end() ? "" : found->second;
}

std::string shared_weights_obstacle(const std::string& model, const std::string& does) {
  const auto what = shared_stage_weights(model);
  if (what.empty()) return "";
  return does + ", and " + model + "'s stages share a weight: " + what;
}

}  // namespace parbench
