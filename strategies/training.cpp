#include "strategies/training.h"

#include "models/token_cross_entropy.h"

#include "models/model_zoo.h"

namespace parbench {

std::optional<c10::ScalarType> autocast_dtype(Precision precision) {
  if (precision == Precision::kBFloat16) return torch::kBFloat16;
  return std::nullopt;
}

void prepare_model(StagedModel& model, Precision precision) {
  model.set_autocast(autocast_dtype(precision));
  if (precision != Precision::kBFloat16) return;
  torch::NoGradGuard no_grad;
  for (auto& parameter : model.module().parameters()) {
    if (parameter.dim() == 4) parameter.set_data(parameter.contiguous(torch::MemoryFormat::ChannelsLast));
  }
}

ModelPtr make_case_model(const RunConfig& config, torch::Device device) {
  auto model = make_model(config.model, config.num_classes, device);
  model->set_checkpoint_blocks(config.checkpoint == Checkpointing::kBlocks);
  return model;
}

std::string to_string(Checkpointing checkpoint) { return checkpoint == Checkpointing::kBlocks ? "blocks" : "off"; }

ModelPtr make_model_on(const ModelFactory& make_model, torch::Device device, Precision precision) {
  auto model = make_model(device);
  model->module().to(device);  // a test's factory may build on the CPU whatever it is asked
  prepare_model(*model, precision);
  return model;
}

torch::Tensor to_input_layout(const torch::Tensor& inputs, Precision precision) {
  const bool image = inputs.dim() == 4;
  return precision == Precision::kBFloat16 && image ? inputs.contiguous(torch::MemoryFormat::ChannelsLast) : inputs;
}

torch::Tensor compute_loss(const torch::Tensor& outputs, const torch::Tensor& targets, LossKind loss) {
  // A language model's (N, T, V) logits: every token predicts the next one.
  if (loss == LossKind::kTokenCrossEntropyChunked) return token_cross_entropy(outputs.flatten(0, 1), targets.flatten());
  auto logits = outputs.to(torch::kFloat32);
  if (loss == LossKind::kCrossEntropy) {
    if (logits.dim() == 3) return torch::nn::functional::cross_entropy(logits.flatten(0, 1), targets.flatten());
    return torch::nn::functional::cross_entropy(logits, targets);
  }
  return torch::mse_loss(logits, targets);
}

std::unique_ptr<torch::optim::SGD> make_sgd(StagedModel& model, double learning_rate) {
  return std::make_unique<torch::optim::SGD>(model.module().parameters(),
                                             torch::optim::SGDOptions(learning_rate));
}

void sgd_update(const std::vector<torch::Tensor>& parameters, double learning_rate) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> updated, gradients;
  for (const auto& parameter : parameters) {
    if (!parameter.grad().defined()) continue;
    updated.push_back(parameter);
    gradients.push_back(parameter.grad());
  }
  if (!updated.empty()) torch::_foreach_add_(updated, gradients, -learning_rate);
}

void fit_config_to_model(RunConfig& config) {
  const auto* model = ModelRegistry::instance().find(config.model);
  if (model == nullptr || !model->language_model()) return;
  // Checkpointing trades time for memory in the loss too: PyTorch's cross_entropy keeps the fp32
  // logits' log-softmax (twice the bf16 logits' bytes) into the backward; the chunked one keeps
  // the logits alone and recomputes. On an H200, gpt2-medium bf16 batch 16 (two runs):
  // 5.9 GiB less at the peak, and a step 8% slower (113.5 ms against 105.3), so not by default.
  config.loss = config.checkpoint == Checkpointing::kBlocks ? LossKind::kTokenCrossEntropyChunked
                                                            : LossKind::kCrossEntropy;
  config.num_classes = model->sample.vocabulary;
}

Batch make_random_batch(const RunConfig& config, int64_t batch_size, torch::Device input_device,
                        torch::Device target_device) {
  const auto& sample = ModelRegistry::instance().get(config.model).sample;
  if (sample.kind == SampleShape::Kind::kTokens) {
    // One sequence of seq_len + 1 tokens per sample: the inputs, and the same shifted by one.
    const auto tokens = torch::randint(sample.vocabulary, {batch_size, config.seq_len + 1}, torch::kLong);
    return {tokens.narrow(1, 0, config.seq_len).contiguous().to(input_device),
            tokens.narrow(1, 1, config.seq_len).contiguous().to(target_device)};
  }
  auto inputs = torch::randn({batch_size, sample.channels, config.image_size, config.image_size});
  auto classes = torch::randint(config.num_classes, {batch_size}, torch::kLong);
  torch::Tensor targets = config.loss == LossKind::kCrossEntropy
                              ? classes
                              : torch::zeros({batch_size, config.num_classes}).scatter_(1, classes.unsqueeze(1), 1.0);
  return {to_input_layout(inputs.to(input_device), config.precision), targets.to(target_device)};
}

}  // namespace parbench
