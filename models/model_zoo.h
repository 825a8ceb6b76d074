// Models by name: the registry every model declares itself in, from its own file, as strategies
// do (strategies/strategy.h). A declaration is data: the model's name, what one of its samples is,
// its stages and their groups, its forward FLOPs, which library runs its fp32 products (MFU's
// peak), and how to build it. Options, --help, MFU and the bare loop read these facts without
// building the model; only a process that trains it builds it (docs/EXTENDING.md, "A model").
#pragma once

#include "models/staged_model.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace parbench {

// What a strategy's setup calls for its model: a fresh one, initialised, its parameters on
// `device` (the CPU for a model the strategy then cuts across devices). Its weights depend on the
// seed only, not on the device.
using ModelFactory = std::function<ModelPtr(torch::Device device)>;

// What one sample of a model is.
struct SampleShape {
  enum class Kind {
    kImage,   // (channels, side, side) floats; --image gives the side
    kTokens,  // a sequence of token ids; --seq gives its length
  };
  Kind kind = Kind::kImage;
  int64_t channels = 3;    // images
  int64_t min_side = 1;    // images: the smallest side the architecture accepts
  int64_t vocabulary = 0;  // tokens: ids are below it, and it is the classes of the next-token loss
  int64_t context = 0;     // tokens: the longest sequence the model has positions for
};

// The library whose kernels do most of a model's multiply-adds, and so whose TF32 switch decides
// what arithmetic its fp32 runs in (benchmarks/measure/mfu.h: the peak its MFU is taken against).
enum class Fp32Engine {
  kCudnnConvolution,  // at::globalContext().allowTF32CuDNN()
  kCublasMatmul,      // at::globalContext().allowTF32CuBLAS()
};

// One model's declaration, built with named setters:
//   ModelInfo::named("tinycnn").listed_at(20).takes_images(/*channels=*/3, /*min_side=*/8)
//       .with_stages({"stem", "block1", "block2", "head"}).with_forward_flops(...)
//       .fp32_runs_on(Fp32Engine::kCudnnConvolution).built_by(...)
struct ModelInfo {
  // Forward floating-point operations for one sample (2 per multiply-accumulate), given the
  // sample's size (an image's side, a sequence's tokens) and the classes it is built with.
  using FlopsFunction = std::function<double(int64_t sample_size, int64_t num_classes)>;
  // A fresh model with `num_classes` outputs (a token model's are its vocabulary), its
  // parameters on `device`. A large model's builder places each piece on the device as it is
  // made, so the host never holds the whole model; its weights are drawn from the CPU's
  // generator either way, so they do not depend on the device.
  using Builder = std::function<ModelPtr(int64_t num_classes, torch::Device device)>;

  std::string name;
  int order = 0;  // position in listings
  SampleShape sample;
  // The stages a cut places (StagedModel::stages()'s names, in order) and their named groups.
  std::vector<std::string> stage_names;
  std::vector<StageGroup> stage_groups;
  FlopsFunction forward_flops_per_sample;
  Fp32Engine fp32_engine = Fp32Engine::kCudnnConvolution;
  Builder build;

  static ModelInfo named(std::string name);
  ModelInfo& listed_at(int position);
  ModelInfo& takes_images(int64_t channels, int64_t min_side);
  ModelInfo& takes_tokens(int64_t vocabulary, int64_t context);
  ModelInfo& with_stages(std::vector<std::string> names, std::vector<StageGroup> groups = {});
  ModelInfo& with_forward_flops(FlopsFunction flops);
  ModelInfo& fp32_runs_on(Fp32Engine engine);
  ModelInfo& built_by(Builder builder);

  // Its samples are token sequences (--seq), not images (--image).
  bool language_model() const { return sample.kind == SampleShape::Kind::kTokens; }
};

// The models linked into this binary. A function-local static, so registration from other
// files' static initialisers is safe.
class ModelRegistry {
 public:
  static ModelRegistry& instance();

  // Throws std::logic_error for a name already registered, or a declaration that leaves out its
  // stages, FLOPs or builder, or whose groups name stages it does not have.
  bool add(ModelInfo info);
  bool add(std::vector<ModelInfo> infos);
  // Throws std::invalid_argument naming the allowed models.
  const ModelInfo& get(const std::string& name) const;
  const ModelInfo* find(const std::string& name) const;  // null for an unknown name
  std::vector<const ModelInfo*> all() const;  // by `order`, then name
  std::vector<std::string> names() const;     // by `order`, then name

 private:
  std::map<std::string, ModelInfo> models_;
};

#define PARBENCH_MODEL_CONCAT_INNER(a, b) a##b
#define PARBENCH_MODEL_CONCAT(a, b) PARBENCH_MODEL_CONCAT_INNER(a, b)
// One ModelInfo, or a std::vector of them (a family of variants from one file).
#define PARBENCH_REGISTER_MODEL(...)                                                                    \
  static const bool PARBENCH_MODEL_CONCAT(parbench_model_registered_, __LINE__) [[maybe_unused]] = \
      ::parbench::ModelRegistry::instance().add(__VA_ARGS__)

// Names of the registered models, by listing order.
std::vector<std::string> model_names();

// A freshly initialised model, its parameters on `device`; throws std::invalid_argument for an
// unknown name. A language model ignores num_classes: its vocabulary is its own
// (fit_config_to_model).
ModelPtr make_model(const std::string& name, int64_t num_classes, torch::Device device = torch::kCPU);

// Whether the model is registered and takes token sequences (--seq) rather than images (--image).
bool is_language_model(const std::string& name);

// Throws std::invalid_argument naming the limit where `model` is a language model whose context
// is shorter than `seq_len` tokens; nothing for an image model.
void check_sequence_length(const std::string& model, int64_t seq_len);

}  // namespace parbench
