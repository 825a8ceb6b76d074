// What a distributed strategy's ranks must train to, for the tests that launch them on CPU ranks
// with PARBENCH_TEST_SAVE_WEIGHTS: single-device training on every rank's batch concatenated,
// from the weights the ranks start from, and the weights the ranks saved.
#pragma once

#include "benchmarks/launch/rank_results.h"
#include "strategies/strategy.h"
#include "strategies/training.h"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace parbench {

// `steps` steps of single on the CPU over the batches ranks 0..ranks-1 draw (`per_rank` samples
// each, seeded kRankDataSeed + rank), concatenated, from the model seeded kRankModelSeed:
// the parameters, then their gradients. `config` gives the model, sample size, precision and
// optimizer; its batch is set here.
inline std::vector<torch::Tensor> single_on_rank_batches(RunConfig config, int ranks, int64_t per_rank, int steps) {
  config.batch_size = per_rank * ranks;
  fit_config_to_model(config);
  std::vector<torch::Tensor> inputs, targets;
  for (int rank = 0; rank < ranks; ++rank) {
    torch::manual_seed(kRankDataSeed + static_cast<uint64_t>(rank));
    const auto batch = make_random_batch(config, per_rank, torch::kCPU, torch::kCPU);
    inputs.push_back(batch.inputs);
    targets.push_back(batch.targets);
  }
  const Batch batch{torch::cat(inputs), torch::cat(targets)};
  auto strategy = StrategyRegistry::instance().get("single").create();
  strategy->setup(
      [&](torch::Device) {
        torch::manual_seed(kRankModelSeed);
        return make_model(config.model, config.num_classes);
      },
      {torch::kCPU}, config);
  for (int step = 0; step < steps; ++step) strategy->train_step(batch);
  std::vector<torch::Tensor> tensors;
  const auto parameters = strategy->model().module().parameters();
  for (const auto& parameter : parameters) tensors.push_back(parameter.detach().clone());
  for (const auto& parameter : parameters) tensors.push_back(parameter.grad().clone());
  return tensors;
}

// The parameters the ranks and single_on_rank_batches start from: `config`'s model seeded
// kRankModelSeed.
inline std::vector<torch::Tensor> initial_rank_weights(RunConfig config) {
  fit_config_to_model(config);
  torch::manual_seed(kRankModelSeed);
  std::vector<torch::Tensor> tensors;
  for (const auto& parameter : make_model(config.model, config.num_classes)->module().parameters()) {
    tensors.push_back(parameter.detach().clone());
  }
  return tensors;
}

// Per rank, what PARBENCH_TEST_SAVE_WEIGHTS=`dir` had it save: the whole parameters, then their gradients.
inline std::vector<std::vector<torch::Tensor>> saved_rank_weights(const std::string& dir, int ranks) {
  std::vector<std::vector<torch::Tensor>> saved;
  for (int rank = 0; rank < ranks; ++rank) {
    std::vector<torch::Tensor> tensors;
    torch::load(tensors, dir + "/rank" + std::to_string(rank) + ".pt");
    saved.push_back(tensors);
  }
  return saved;
}

}  // namespace parbench
