// A model as an ordered list of named stages, so strategies can partition it across devices
// without knowing its internals.
#pragma once

#include <torch/nn/parallel/data_parallel.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

// One stage: the smallest unit a cut places on a device (for ResNet: the stem, each residual
// block, named by its module path as layer1.0, and the head). The modules are the model's own
// submodules, so moving them moves the model's parameters.
struct Stage {
  std::string name;
  std::vector<std::shared_ptr<torch::nn::Module>> modules;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  // A repeated block (a residual block, a transformer block): what activation checkpointing
  // recomputes (StagedModel::set_checkpoint_blocks).
  bool block = false;
};

// A named run of consecutive stages (ResNet's layer1: layer1.0..layer1.2), which a cut may name
// instead of its stages, and which format_cut writes by its name when a part holds all of it.
struct StageGroup {
  std::string name;
  std::vector<std::string> stages;  // in order
};

// Autocast for the enclosed forward code on one device type; a no-op without a dtype.
// Autocast state is thread-local, so every thread that runs a forward needs its own scope.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device_type, std::optional<c10::ScalarType> dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_type_;
  bool active_ = false;
  bool was_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Float;
};

// What strategies see of a model. Implemented by StagedModule<Derived> below. What is known of a
// model without building it (its sample, stage names, FLOPs) is its declaration in the model
// registry (models/model_zoo.h).
class StagedModel {
 public:
  virtual ~StagedModel() = default;

  virtual std::string name() const = 0;
  // The model's stages, in order; with set_checkpoint_blocks(true), each block's forward keeps
  // only its input and is recomputed in the backward (models/activation_checkpoint.h).
  std::vector<Stage> stages();
  // Groups of consecutive stages, in order, none overlapping; none by default.
  virtual std::vector<StageGroup> stage_groups() const { return {}; }
  virtual torch::nn::Module& module() = 0;
  // Whole-model forward under the model's autocast setting (see set_autocast).
  virtual torch::Tensor forward(torch::Tensor input) = 0;
  // torch::nn::parallel::data_parallel on this model: replicate, scatter, apply, gather.
  virtual torch::Tensor data_parallel_forward(const torch::Tensor& input,
                                              const std::vector<torch::Device>& devices) = 0;
  // Facts about the last forward for the benchmark label (a transformer's attention kernel).
  virtual std::map<std::string, std::string> forward_facts() const { return {}; }

  // Run forwards under autocast to `dtype` (copied into data-parallel replicas).
  void set_autocast(std::optional<c10::ScalarType> dtype) { autocast_dtype_ = dtype; }
  std::optional<c10::ScalarType> autocast_dtype() const { return autocast_dtype_; }
  // Activation checkpointing of every block (--checkpoint=blocks; copied into data-parallel replicas).
  void set_checkpoint_blocks(bool on) { checkpoint_blocks_ = on; }
  bool checkpoint_blocks() const { return checkpoint_blocks_; }

 protected:
  // The stages as the model defines them, forwards unchanged: what each model implements.
  virtual std::vector<Stage> build_stages() = 0;

  std::optional<c10::ScalarType> autocast_dtype_;
  bool checkpoint_blocks_ = false;
};

using ModelPtr = std::shared_ptr<StagedModel>;

// Sets every tensor of `target` to a copy of the tensor of the same name in `source`, on
// `device` if given (else where the source lives). Throws if the names differ.
void copy_named_tensors(const torch::OrderedDict<std::string, torch::Tensor>& source,
                        const torch::OrderedDict<std::string, torch::Tensor>& target,
                        const std::optional<torch::Device>& device);

// Base for concrete models: torch::nn::Cloneable (needed by data_parallel's replicate) plus
// the StagedModel interface.
template <typename Derived>
class StagedModule : public torch::nn::Cloneable<Derived>, public StagedModel {
 public:
  torch::nn::Module& module() override { return *this; }

  torch::Tensor forward(torch::Tensor input) override {
    AutocastScope autocast(input.device().type(), autocast_dtype_);
    for (auto& stage : stages()) {
      input = stage.forward(input);
    }
    return input;
  }

  // A deep copy, as Cloneable's, built in one pass. data_parallel replicates the model through
  // clone() every step, and Cloneable's clone re-runs reset() at every level of the module tree
  // (model, then each block, then each layer), so ResNet-50's weights were built and randomly
  // initialised on the CPU four times per replica; here the model is built once, then
  // weights, buffers, train/eval modes and the autocast setting are copied in.
  std::shared_ptr<torch::nn::Module> clone(
      const std::optional<torch::Device>& device = std::nullopt) const override {
    torch::NoGradGuard no_grad;
    // Derived::same_architecture(): a new model built like this one; it may skip weight
    // initialisation, the weights are overwritten next.
    std::shared_ptr<Derived> copy = static_cast<const Derived&>(*this).same_architecture();
    copy->set_autocast(autocast_dtype_);
    copy->set_checkpoint_blocks(checkpoint_blocks_);
    copy_named_tensors(this->named_parameters(), copy->named_parameters(), device);
    copy_named_tensors(this->named_buffers(), copy->named_buffers(), device);
    // Pre-order, so a child's own mode overrides the one its parent's train() gave it.
    const auto copied_modules = copy->named_modules();
    for (const auto& item : this->named_modules()) copied_modules[item.key()]->train(item.value()->is_training());
    return copy;
  }

  torch::Tensor data_parallel_forward(const torch::Tensor& input,
                                      const std::vector<torch::Device>& devices) override {
    auto self = std::dynamic_pointer_cast<Derived>(this->shared_from_this());
    return torch::nn::parallel::data_parallel(self, input, devices, /*output_device=*/devices.front());
  }
};

}  // namespace parbench
