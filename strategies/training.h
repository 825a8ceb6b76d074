// The pieces of one training step that every strategy shares.
#pragma once

#include "strategies/strategy.h"

#include <optional>

namespace parbench {

// The autocast dtype a precision runs forwards under (none for fp32).
std::optional<c10::ScalarType> autocast_dtype(Precision precision);

// Precision-specific model preparation: autocast setting and, for bf16, channels-last
// conv weights. Call after the model is on its devices.
void prepare_model(StagedModel& model, Precision precision);

// A case's model, its parameters on `device` (the caller seeds it): config.model with config's
// classes, its blocks checkpointed where config.checkpoint asks. What the harness's ModelFactory
// makes.
ModelPtr make_case_model(const RunConfig& config, torch::Device device = torch::kCPU);

std::string to_string(Checkpointing checkpoint);

// A fresh model from `make_model`, whole on `device` and prepared for `precision`.
ModelPtr make_model_on(const ModelFactory& make_model, torch::Device device, Precision precision);

// Inputs in the layout the precision runs in (channels-last for bf16).
torch::Tensor to_input_layout(const torch::Tensor& inputs, Precision precision);

// Mean loss of `outputs` against `targets` (computed in fp32); over every token for a
// language model's (N, T, V) logits.
torch::Tensor compute_loss(const torch::Tensor& outputs, const torch::Tensor& targets, LossKind loss);

// SGD over all of the model's parameters, wherever they live (lr as in the tutorial).
std::unique_ptr<torch::optim::SGD> make_sgd(StagedModel& model, double learning_rate);

// Plain SGD (no momentum) over `parameters` in one multi-tensor update: torch::optim::SGD's
// arithmetic, issued as a few kernels instead of one per parameter. Parameters without a
// gradient are left alone.
void sgd_update(const std::vector<torch::Tensor>& parameters, double learning_rate);

// For a model whose samples are tokens: next-token cross-entropy over its vocabulary (the loss
// and classes a run config holds). Image models keep the config's own.
void fit_config_to_model(RunConfig& config);

// A random batch of `batch_size` images of the model's channels (its SampleShape): inputs
// ~ N(0, 1), uniformly drawn classes as one-hot rows (MSE) or indices (cross-entropy). For a language model, `batch_size` sequences
// of config.seq_len tokens drawn uniformly from its vocabulary, and as targets each
// sequence shifted by one token.
Batch make_random_batch(const RunConfig& config, int64_t batch_size, torch::Device input_device,
                        torch::Device target_device);

}  // namespace parbench
