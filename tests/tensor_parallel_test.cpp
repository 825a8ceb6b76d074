// tensor_parallel on the CPU (the store backend):
// - its ranks, started by parbench's launcher, train tinygpt to single's parameters (gathered
//   from their shards), sequence parallel off and on, and count the bytes the ring formulas give;
// - in-process ranks (threads, each with a store backend over one in-memory store): the
//   vocabulary-parallel cross-entropy matches the whole one, and a GPT of 6 heads split over 2
//   and 3 ranks gives single's loss and gradients (tinygpt's 4 heads do not split over 3);
// - the case builder refuses a degree that does not divide the shapes, with the reason.
#include "benchmarks/advise/advise.h"
#include "benchmarks/advise/advise_memory.h"
#include "benchmarks/cases/cases.h"
#include "benchmarks/launch/launcher.h"
#include "benchmarks/launch/temporary_directory.h"
#include "benchmarks/measure/graphed_step.h"
#include "core/device_timer.h"
#include "models/gpt.h"
#include "models/model_zoo.h"
#include "strategies/distributed/rehearsal_backend.h"
#include "strategies/distributed/store_backend.h"
#include "strategies/prediction.h"
#include "strategies/strategy.h"
#include "models/tensor_parallel/gpt.h"
#include "strategies/training.h"
#include "tests/launched_case.h"
#include "tests/option_parsing.h"
#include "tests/single_reference.h"
#include "tests/tensor_compare.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <set>
#include <thread>

namespace parbench {
namespace {

constexpr double kTolerance = 1e-5;  // relative, per tensor (fp32)
constexpr int64_t kBatch = 6;       // global: each of 2 ranks draws 3
constexpr int64_t kSeq = 16;
constexpr int kSteps = 3;  // one warm-up step and two timed iterations of one step

struct TensorParallelRun {
  std::map<std::string, std::string> facts;
  std::map<std::string, double> counters;
  std::vector<std::vector<torch::Tensor>> ranks;  // per rank: the whole parameters, then their gradients
};

TensorParallelRun run_tensor_parallel(int ranks, const std::string& sequence_parallel,
                                      const std::string& optimizer = "sgd", const std::string& checkpoint = "off",
                                      const std::vector<std::string>& more = {}) {
  TemporaryDirectory weights("parbench-tp-test");
  std::vector<std::string> arguments = {
      "--strategies=tensor_parallel", "--models=tinygpt", "--batch=" + std::to_string(kBatch),
      "--seq=" + std::to_string(kSeq), "--repetitions=1", "--iterations=2", "--steps=1", "--warmup=1",
      "--allreduce=off", "--dist-timeout=30", "--sequence-parallel=" + sequence_parallel,
      "--optimizer=" + optimizer, "--checkpoint=" + checkpoint};
  arguments.insert(arguments.end(), more.begin(), more.end());  // a later flag overrides an earlier one
  const auto run = launch_case(PARBENCH_BINARY, arguments, only_train_case(arguments, ranks), ranks, /*timeout_s=*/60,
                               {{"PARBENCH_TEST_SAVE_WEIGHTS", weights.path()}});
  EXPECT_EQ(run.world_size, ranks);
  return {run.facts, run.counters, saved_rank_weights(weights.path(), ranks)};
}

RunConfig single_config(OptimizerKind optimizer) {
  RunConfig config;
  config.model = "tinygpt";
  config.optimizer = optimizer;
  config.seq_len = kSeq;
  return config;
}

// Single-device training on every rank's share concatenated (the whole batch each rank trains
// on), from the seeded initial weights.
std::vector<torch::Tensor> run_single(int ranks, OptimizerKind optimizer, int steps) {
  return single_on_rank_batches(single_config(optimizer), ranks, kBatch / ranks, steps);
}

// AdamW's weights are compared by their updates (the weights less the initial ones): AdamW divides
// each gradient by its own root mean square, so a gradient near its rounding noise is amplified
// into a sizeable part of the learning rate, and a bias that starts at zero has a norm no larger
// than its updates. The gradients are compared at kTolerance as for SGD. Measured: updates within
// 2.5e-7 of each other here, and in one CI run a weight 1.53e-5 off (h.0.ln_1.bias, norm 0.013)
// on a loaded host; a missed step or a wrong bias correction moves an update by 26% or more.
constexpr double kAdamwUpdateTolerance = 1e-3;

void expect_matches_single(const TensorParallelRun& run, int ranks, OptimizerKind optimizer = OptimizerKind::kSgd,
                           double tolerance = kTolerance, int steps = kSteps) {
  for (int rank = 1; rank < ranks; ++rank) {
    ASSERT_EQ(run.ranks[rank].size(), run.ranks[0].size());
    for (size_t i = 0; i < run.ranks[0].size(); ++i) {
      EXPECT_TRUE(torch::equal(run.ranks[rank][i], run.ranks[0][i])) << "rank " << rank << " tensor " << i;
    }
  }
  const auto single = run_single(ranks, optimizer, steps);
  const auto initial = initial_rank_weights(single_config(optimizer));
  ASSERT_EQ(run.ranks[0].size(), single.size());
  ASSERT_EQ(initial.size() * 2, single.size());
  const auto names = make_model("tinygpt", 96)->module().named_parameters().keys();
  ASSERT_EQ(names.size() * 2, single.size());
  for (size_t i = 0; i < single.size(); ++i) {
    const auto& name = names[i % names.size()];
    ASSERT_EQ(run.ranks[0][i].sizes(), single[i].sizes()) << name;
    auto value = run.ranks[0][i], reference = single[i];
    const bool adamw_weight = optimizer == OptimizerKind::kAdamW && i < names.size();
    if (adamw_weight) {
      value = value - initial[i];
      reference = reference - initial[i];
    }
    // The key bias's gradient is zero but for rounding (a constant added to every key adds
    // the same score to every key of a query, which softmax ignores); AdamW divides it by its own
    // root mean square, so its update is the rounding's sign times the learning rate, whatever
    // the strategy. The query and value biases are compared.
    if (adamw_weight && name.find("attn.c_attn.bias") != std::string::npos) {
      const auto thirds = [](const torch::Tensor& bias) {
        const auto parts = bias.chunk(3);
        return torch::cat({parts[0], parts[2]});
      };
      value = thirds(value);
      reference = thirds(reference);
    }
    EXPECT_LT(relative_difference(value, reference), adamw_weight ? kAdamwUpdateTolerance : tolerance)
        << (adamw_weight ? "update " : i < names.size() ? "weight " : "gradient ") << name;
  }
}

// tinygpt (2 layers, width 32, vocabulary 96), 6 sequences of 16 tokens over 2 ranks, fp32: the
// bytes one rank sends per step by the ring formulas (docs/METRICS.md), with (w-1)/w = 1/2.
double expected_comm_bytes(bool sequence_parallel) {
  const double activation = 16.0 * 6 * 32 * 4;  // (T, N, d) fp32
  const double batch_share_gather = 2 * 0.5 * (6.0 * 16 * 8);  // tokens and targets, int64
  const double loss = 0.5 * (2.0 * 96 * 4) + 2 * 0.5 * (96.0 * 4);  // log-sum-exp all-gather, target all-reduce
  // Without sequence parallelism: all-reduces (2 (w-1)/w N) of the embedding, of each block's
  // two row-parallel outputs, and backward of the two column-parallel inputs per block and the
  // head's: 1 + 2 x 2 + 2 x 2 + 1 = 10. With it each becomes an all-gather and a reduce-scatter
  // ((w-1)/w N each), the same bytes, plus the summed gradients of the replicated parameters:
  // the position embedding (1024 x 32), 4 x 32 + 2 x 32 per block of LayerNorms and biases, ln_f.
  double bytes = batch_share_gather + loss + 10 * 2 * 0.5 * activation;
  if (sequence_parallel) bytes += 2 * 0.5 * 4 * (1024.0 * 32 + 2 * (6 * 32) + 2 * 32);
  return bytes;
}

// Of those, the all-gathers' and reduce-scatters': the batch's gather and the log-sum-exp's, and
// with sequence parallelism every layer's collective.
double expected_gather_scatter_bytes(bool sequence_parallel) {
  const double activation = 16.0 * 6 * 32 * 4;
  const double gathers = 2 * 0.5 * (6.0 * 16 * 8) + 0.5 * (2.0 * 96 * 4);
  return gathers + (sequence_parallel ? 10 * 2 * 0.5 * activation : 0.0);
}

TEST(TensorParallel, TwoRanksTrainAsSingleDevice) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto run = run_tensor_parallel(2, "off");
  EXPECT_EQ(run.facts.at("backend"), "store");
  EXPECT_EQ(run.facts.at("degree"), "2");
  EXPECT_EQ(run.facts.at("sp"), "off");
  expect_matches_single(run, 2);
  EXPECT_DOUBLE_EQ(run.counters.at("tp_comm_mib_per_step"), expected_comm_bytes(false) / (1 << 20));
  EXPECT_DOUBLE_EQ(run.counters.at("tp_gather_scatter_mib_per_step"), expected_gather_scatter_bytes(false) / (1 << 20));
}

TEST(TensorParallel, TwoRanksWithSequenceParallelTrainAsSingleDevice) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto run = run_tensor_parallel(2, "on");
  EXPECT_EQ(run.facts.at("sp"), "on");
  expect_matches_single(run, 2);
  EXPECT_DOUBLE_EQ(run.counters.at("tp_comm_mib_per_step"), expected_comm_bytes(true) / (1 << 20));
  EXPECT_DOUBLE_EQ(run.counters.at("tp_gather_scatter_mib_per_step"), expected_gather_scatter_bytes(true) / (1 << 20));
}

// --checkpoint=blocks: each parallel block runs again in the backward, its collectives with it
// (in the same order on every rank), and trains as single does; the recomputed forwards' bytes
// are counted as sent.
TEST(TensorParallel, CheckpointedBlocksWithSequenceParallelTrainAsSingleDevice) {
  const GpusHiddenFromRanks gpus_hidden;
  const auto run = run_tensor_parallel(2, "on", "sgd", "blocks");
  expect_matches_single(run, 2);
  EXPECT_GT(run.counters.at("tp_comm_mib_per_step"), expected_comm_bytes(true) / (1 << 20));
}

TEST(TensorParallel, AdamwOnShardsMatchesSingleDevice) {
  const GpusHiddenFromRanks gpus_hidden;
  expect_matches_single(run_tensor_parallel(2, "on", "adamw"), 2, OptimizerKind::kAdamW);
}

// On GPUs (NCCL), sequence parallel off and on, eager and replayed from a CUDA graph: the ranks
// train tinygpt as single does on the CPU. Within 1e-3: the GPUs' fp32 matmuls (TF32 off) and
// NCCL's sums round differently from the CPU's; a sum for a mean, a missing all-reduce or a wrong
// shard is off by O(1).
TEST(TensorParallel, TwoGpusOnNcclTrainAsSingleDeviceEagerAndGraphed) {
  const int gpus = visible_gpu_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpus << " visible";
  for (const std::string sequence_parallel : {"off", "on"}) {
    const auto eager = run_tensor_parallel(2, sequence_parallel);
    EXPECT_EQ(eager.facts.at("backend"), "nccl");
    expect_matches_single(eager, 2, OptimizerKind::kSgd, 1e-3);
    // With a graph, kGraphWarmupSteps more steps run on a side stream before the capture.
    const auto graphed = run_tensor_parallel(2, sequence_parallel, "sgd", "off", {"--cuda-graph=on"});
    expect_matches_single(graphed, 2, OptimizerKind::kSgd, 1e-3, kSteps + kGraphWarmupSteps);
  }
}

// --tp-halves=on: the batch's two halves interleaved collective by collective, sequence parallel
// off and on, train as single does; they send the same bytes in twice the collectives, but the
// batch's and the replicated gradients' (issued once for both halves).
TEST(TensorParallel, TwoRanksInHalvesTrainAsSingleDevice) {
  const GpusHiddenFromRanks gpus_hidden;
  for (const std::string sequence_parallel : {"off", "on"}) {
    const auto whole = run_tensor_parallel(2, sequence_parallel);
    const auto halves = run_tensor_parallel(2, sequence_parallel, "sgd", "off", {"--tp-halves=on"});
    EXPECT_EQ(halves.facts.at("halves"), "on, one stream");
    expect_matches_single(halves, 2);
    EXPECT_DOUBLE_EQ(halves.counters.at("tp_comm_mib_per_step"), expected_comm_bytes(sequence_parallel == "on") / (1 << 20))
        << "sequence parallel " << sequence_parallel;
    // Once for both halves: the batch's two gathers, and with sequence parallelism the replicated
    // parameters' gradient all-reduce.
    const double once = sequence_parallel == "on" ? 3 : 2;
    EXPECT_DOUBLE_EQ(halves.counters.at("tp_collectives_per_step"),
                     2 * whole.counters.at("tp_collectives_per_step") - once)
        << "sequence parallel " << sequence_parallel;
  }
}

// On GPUs: the second half on its own CUDA stream, eager and replayed from a CUDA graph.
TEST(TensorParallel, TwoGpusOnNcclInHalvesTrainAsSingleDeviceEagerAndGraphed) {
  const int gpus = visible_gpu_count();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpus << " visible";
  for (const std::string sequence_parallel : {"off", "on"}) {
    const auto eager = run_tensor_parallel(2, sequence_parallel, "sgd", "off", {"--tp-halves=on"});
    EXPECT_EQ(eager.facts.at("halves"), "on, two CUDA streams");
    expect_matches_single(eager, 2, OptimizerKind::kSgd, 1e-3);
    // Per rank (`_rank<r>`), as zero's waits; the batch's gather before the halves fork always shows.
    EXPECT_GT(eager.counters.at("tp_comm_ms_rank0"), 0.0);
    EXPECT_GT(eager.counters.at("tp_comm_ms_rank1"), 0.0);
    const auto graphed = run_tensor_parallel(2, sequence_parallel, "sgd", "off", {"--tp-halves=on", "--cuda-graph=on"});
    EXPECT_EQ(graphed.facts.at("halves"), "on, two CUDA streams");
    expect_matches_single(graphed, 2, OptimizerKind::kSgd, 1e-3, kSteps + kGraphWarmupSteps);
  }
}

// The exposed part of waits on several streams: a wait shows only while no other stream, between
// its own first and last wait, is computing.
TEST(TensorParallel, ExposedWaitsOnTwoStreamsCountOnlyWhatNoStreamComputesThrough) {
  // One stream: the sum.
  EXPECT_DOUBLE_EQ(exposed_wait_ms({{1, 0, 2}, {1, 5, 6}}), 3.0);
  // Stream 1 waits 0-2 and 5-6; stream 2 waits 1-3 and 7-8. Stream 2's span is 1-8, stream 1's
  // 0-6. 0-1: only stream 1 is within its span: exposed 1. 1-2: both wait: 1. 2-3: stream 2
  // waits, stream 1 computes: 0. 5-6: stream 1 waits, stream 2 computes: 0. 7-8: stream 2 waits,
  // stream 1 is past its span: 1.
  EXPECT_DOUBLE_EQ(exposed_wait_ms({{1, 0, 2}, {1, 5, 6}, {2, 1, 3}, {2, 7, 8}}), 3.0);
  EXPECT_DOUBLE_EQ(exposed_wait_ms({}), 0.0);
}

// --tp-halves=on is refused where the halves cannot be made or interleaved.
TEST(TensorParallel, HalvesNeedAnEvenBatchAndNoCheckpointing) {
  const auto skip_reason = [](const std::vector<std::string>& arguments) {
    auto specs = build_cases(parsed_options(arguments, /*has_gpu=*/false), /*visible_gpus=*/3);
    return specs.size() == 1 ? specs.front().skip_reason : std::string("cases: ") + std::to_string(specs.size());
  };
  // gpt2-small: 12 heads, which 3 ranks split (an even degree makes every whole batch even).
  const std::vector<std::string> common = {"--strategies=tensor_parallel", "--models=gpt2-small", "--seq=16",
                                           "--tp-halves=on"};
  auto even = common;
  even.push_back("--gpus=3");
  even.push_back("--batch=6");  // 2 a rank, 6 in all
  EXPECT_EQ(skip_reason(even), "");
  auto odd = common;
  odd.push_back("--gpus=3");
  odd.push_back("--batch=9");  // 3 a rank, 9 in all: no halves
  EXPECT_NE(skip_reason(odd).find("the batch 9 must be even"), std::string::npos) << skip_reason(odd);
  auto checkpointed = common;
  checkpointed.push_back("--gpus=2");
  checkpointed.push_back("--batch=6");
  checkpointed.push_back("--checkpoint=blocks");
  EXPECT_NE(skip_reason(checkpointed).find("--checkpoint=off"), std::string::npos) << skip_reason(checkpointed);
}

// Ranks as threads of this process, each with a store backend over one in-memory store.
template <class Body>
void run_in_process_ranks(int degree, const Body& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::exception_ptr> errors(degree);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < degree; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto backend = c10::make_intrusive<StoreBackend>(c10::make_intrusive<c10d::PrefixStore>("tp", store), rank,
                                                         degree, std::chrono::seconds(30));
        const TensorParallelGroup group{backend.get(), rank, degree, nullptr};
        body(group);
        backend->shutdown();
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

TEST(TensorParallel, VocabParallelCrossEntropyMatchesTheWholeOne) {
  for (const int degree : {2, 3}) {
    torch::manual_seed(7);
    const int64_t tokens = 10, vocabulary = 12;
    // Large logits: a cross-entropy that skipped the max shift would overflow exp.
    const auto logits = (torch::randn({tokens, vocabulary}) * 40).requires_grad_();
    const auto targets = torch::randint(vocabulary, {tokens}, torch::kLong);
    const auto whole = torch::nn::functional::cross_entropy(logits, targets);
    whole.backward();
    std::vector<double> losses(degree);
    std::vector<torch::Tensor> gradients(degree);
    run_in_process_ranks(degree, [&](const TensorParallelGroup& group) {
      const auto local = logits.detach().chunk(degree, 1)[group.rank].clone().requires_grad_();
      const auto loss = vocab_parallel_cross_entropy(local, targets, group);
      loss.backward();
      losses[group.rank] = loss.item<double>();
      gradients[group.rank] = local.grad();
    });
    for (int rank = 0; rank < degree; ++rank) {
      EXPECT_NEAR(losses[rank], whole.item<double>(), 1e-5 * std::abs(whole.item<double>())) << "rank " << rank;
    }
    EXPECT_LT(relative_difference(torch::cat(gradients, 1), logits.grad()), kTolerance) << degree << " ranks";
  }
}

// 6 heads and a vocabulary of 96 split over 2 and 3 ranks; 12 tokens split too.
const GptConfig kSixHeads{"tp-test-gpt", /*layers=*/2, /*width=*/48, /*heads=*/6, /*vocabulary=*/96, /*context=*/64};

TEST(TensorParallel, ShardedGptGivesSingleLossAndGradientsOnTwoAndThreeRanks) {
  torch::manual_seed(11);
  GPTImpl whole(kSixHeads);
  const auto tokens = torch::randint(kSixHeads.vocabulary, {2, 12}, torch::kLong);
  const auto targets = torch::randint(kSixHeads.vocabulary, {2, 12}, torch::kLong);
  const auto loss = compute_loss(whole.forward(tokens), targets, LossKind::kCrossEntropy);
  loss.backward();
  const auto parameters = whole.parameters();
  for (const int degree : {2, 3}) {
    for (const bool sequence_parallel : {false, true}) {
      const auto what = std::to_string(degree) + " ranks, sequence parallel " + (sequence_parallel ? "on" : "off");
      std::vector<double> losses(degree);
      std::vector<std::vector<torch::Tensor>> gathered(degree);
      run_in_process_ranks(degree, [&](const TensorParallelGroup& group) {
        TensorParallelGptImpl sharded(whole, group, sequence_parallel);
        const auto logits = sharded.forward(tokens);  // (T, N, V/w)
        const auto local_loss = vocab_parallel_cross_entropy(logits.flatten(0, 1), targets.t().flatten(), group);
        local_loss.backward();
        sharded.finish_gradients();
        losses[group.rank] = local_loss.item<double>();
        for (const auto& item : sharded.named_parameters()) {
          gathered[group.rank].push_back(gather_shards(item.value().grad(), gpt_shard_kind(item.key()), group));
        }
      });
      for (int rank = 0; rank < degree; ++rank) {
        EXPECT_NEAR(losses[rank], loss.item<double>(), 1e-5 * loss.item<double>()) << what;
        ASSERT_EQ(gathered[rank].size(), parameters.size()) << what;
        for (size_t i = 0; i < parameters.size(); ++i) {
          ASSERT_EQ(gathered[rank][i].sizes(), parameters[i].sizes()) << what << ", parameter " << i;
          EXPECT_LT(relative_difference(gathered[rank][i], parameters[i].grad()), 1e-4) << what << ", gradient " << i;
        }
      }
    }
  }
}

TEST(TensorParallel, ShardsGatherBackToTheWholeParameter) {
  torch::manual_seed(3);
  GPTImpl whole(kSixHeads);
  run_in_process_ranks(3, [&](const TensorParallelGroup& group) {
    TensorParallelGptImpl sharded(whole, group, /*sequence_parallel=*/false);
    const auto sources = whole.named_parameters();
    for (const auto& item : sharded.named_parameters()) {
      const auto back = gather_shards(item.value().detach(), gpt_shard_kind(item.key()), group);
      if (!torch::equal(back, sources[item.key()])) throw std::runtime_error(item.key() + " did not gather back");
    }
  });
}

// Rank 0 of `size` whose collectives are rehearsed (sent nowhere), each one's kind recorded in
// the order issued.
class RecordingBackend final : public c10d::Backend {
 public:
  explicit RecordingBackend(int size) : Backend(/*rank=*/0, size), rehearsal_(c10::make_intrusive<RehearsalBackend>(size)) {}
  const std::string getBackendName() const override { return "recording"; }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& options = c10d::AllreduceOptions()) override {
    kinds.push_back("all-reduce");
    return rehearsal_->allreduce(tensors, options);
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& options = c10d::AllgatherOptions()) override {
    kinds.push_back("all-gather");
    return rehearsal_->_allgather_base(output, input, options);
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& options = c10d::ReduceScatterOptions()) override {
    kinds.push_back("reduce-scatter");
    return rehearsal_->_reduce_scatter_base(output, input, options);
  }

  std::vector<std::string> kinds;

 private:
  c10::intrusive_ptr<RehearsalBackend> rehearsal_;
};

// --tp-halves=on with sequence parallelism: the halves' collectives alternate one by one, in the
// forward and again in the backward (autograd takes the nodes in reverse order of creation, and
// each collective's backward is the other kind), so the communicator sees each kind twice in a
// row. Measured on 2 H200s, two other orders were slower (docs/STRATEGIES.md): a half's
// reduce-scatter and next all-gather together (76.3 against 71.4 ms graphed), and each half on a
// communicator of its own (72.5 against 71.7 in the same call).
TEST(TensorParallel, HalvesAlternateCollectiveByCollective) {
  torch::manual_seed(5);
  GPTImpl whole(kSixHeads);
  auto backend = c10::make_intrusive<RecordingBackend>(2);
  const TensorParallelGroup group{backend.get(), 0, 2, nullptr};
  TensorParallelGptImpl sharded(whole, group, /*sequence_parallel=*/true);
  const auto tokens = torch::randint(kSixHeads.vocabulary, {2, 12}, torch::kLong);
  const auto logits = sharded.forward_halves(tokens, /*streams=*/{});
  // The embedding's reduce-scatter, each block's four collectives, the head's all-gather; each once per half.
  std::vector<std::string> expected = {"reduce-scatter", "reduce-scatter"};
  for (int64_t layer = 0; layer < kSixHeads.layers; ++layer) {
    for (const char* kind : {"all-gather", "reduce-scatter", "all-gather", "reduce-scatter"}) {
      expected.insert(expected.end(), {kind, kind});
    }
  }
  expected.insert(expected.end(), {"all-gather", "all-gather"});
  EXPECT_EQ(backend->kinds, expected);
  backend->kinds.clear();
  // Unwritten gathers leave any values: only the order of the backward's collectives is looked at.
  (logits[0].sum() + logits[1].sum()).backward();
  EXPECT_EQ(backend->kinds, expected);
}

// The case builder's refusals, before any rank starts.
std::string skip_reason(const std::vector<std::string>& arguments, int ranks) {
  auto with_gpus = arguments;
  with_gpus.push_back("--gpus=" + std::to_string(ranks));
  const auto cases = build_cases(parsed_options(with_gpus, /*has_gpu=*/false), /*visible_gpus=*/ranks);
  EXPECT_EQ(cases.size(), 1u);
  return cases.empty() ? "" : cases.front().skip_reason;
}

TEST(TensorParallel, RefusesDegreesThatDoNotDivideTheShapes) {
  const std::vector<std::string> tinygpt = {"--strategies=tensor_parallel", "--models=tinygpt", "--batch=6",
                                            "--seq=16"};
  EXPECT_EQ(skip_reason(tinygpt, 2), "");
  const auto heads = skip_reason(tinygpt, 3);
  EXPECT_NE(heads.find("4 attention heads do not split over 3 ranks"), std::string::npos) << heads;
  EXPECT_NE(heads.find("divide the head count"), std::string::npos) << heads;

  auto odd_sequence = tinygpt;
  odd_sequence.back() = "--seq=15";
  EXPECT_EQ(skip_reason(odd_sequence, 2), "");  // sequence parallel off: any length
  odd_sequence.push_back("--sequence-parallel=on");
  const auto sequence = skip_reason(odd_sequence, 2);
  EXPECT_NE(sequence.find("15 tokens"), std::string::npos) << sequence;
  EXPECT_NE(sequence.find("must divide --seq"), std::string::npos) << sequence;

  auto odd_batch = tinygpt;
  odd_batch[2] = "--batch=5";
  EXPECT_NE(skip_reason(odd_batch, 2).find("the batch 5 must divide by the degree"), std::string::npos);

  const auto image_model =
      skip_reason({"--strategies=tensor_parallel", "--models=tinycnn", "--batch=6", "--image=16"}, 2);
  EXPECT_NE(image_model.find("tensor_parallel has a plan for the GPT, Llama families; tinycnn has none"),
            std::string::npos)
      << image_model;
  // The Llama family has a plan of its own (models/tensor_parallel/llama.h).
  EXPECT_EQ(skip_reason({"--strategies=tensor_parallel", "--models=tinyllama", "--batch=6", "--seq=8"}, 2), "");
}

TEST(TensorParallel, ObstacleNamesWhatMustDivide) {
  GptConfig odd_vocabulary = kSixHeads;
  odd_vocabulary.vocabulary = 97;
  EXPECT_NE(tensor_parallel_obstacle(odd_vocabulary, 2, 12, false).find("vocabulary of 97"), std::string::npos);
  EXPECT_EQ(tensor_parallel_obstacle(kSixHeads, 3, 12, true), "");
  EXPECT_NE(tensor_parallel_obstacle(kSixHeads, 4, 12, false).find("6 attention heads"), std::string::npos);
}

// The one case of `strategy` on tinygpt over 2 ranks, as the benchmark builds it.
CaseSpec tinygpt_case(const std::string& strategy, const std::string& sequence_parallel) {
  auto specs = build_cases(parsed_options({"--strategies=" + strategy, "--models=tinygpt", "--gpus=2",
                                           "--batch=" + std::to_string(kBatch), "--seq=" + std::to_string(kSeq),
                                           "--sequence-parallel=" + sequence_parallel},
                                          /*has_gpu=*/false),
                           /*visible_gpus=*/2);
  specs.erase(std::remove_if(specs.begin(), specs.end(), [](const CaseSpec& spec) { return !spec.skip_reason.empty(); }),
              specs.end());
  if (specs.size() != 1) throw std::logic_error(strategy + ": " + std::to_string(specs.size()) + " cases");
  return specs.front();
}

// --advise's profile of a tensor_parallel case: its rank 0, rehearsed alone on one device
// (benchmarks/advise/advise.h), tallies what a real rank sends, sequence parallel off and on (the
// same bytes as TwoRanksTrainAsSingleDevice's ranks counted), and its step allocates less than
// single's at the whole batch: it holds a slice of the model.
TEST(TensorParallel, ARehearsedRankTalliesWhatARealRankSendsAndHoldsLessThanSingle) {
  const auto single = tinygpt_case("single", "off");
  double single_bytes = 0;
  {
    const auto& info = *single.strategy;
    const auto rehearsal = rehearse(RehearsalRequest{[&info] { return info.create(); }, single.config}, torch::kCPU, false);
    single_bytes = rehearsal.step_bytes;
  }
  for (const std::string sequence_parallel : {"off", "on"}) {
    const auto spec = tinygpt_case("tensor_parallel", sequence_parallel);
    const CaseConditions conditions{spec.config, spec.global_batch, 2, 2, false};
    ASSERT_EQ(spec.config.batch_size, kBatch / 2);  // each rank's share
    ProfileRequest request;
    spec.strategy->predictor().request(conditions, request);
    ASSERT_EQ(request.rehearsals.size(), 1u);
    const auto& asked = request.rehearsals.begin()->second;
    const auto rehearsal = rehearse(asked, torch::kCPU, /*graphed=*/false);
    EXPECT_DOUBLE_EQ(rehearsal.counters.at("tp_comm_mib_per_step"), expected_comm_bytes(sequence_parallel == "on") / (1 << 20))
        << "sequence parallel " << sequence_parallel;
    EXPECT_DOUBLE_EQ(rehearsal.counters.at("tp_gather_scatter_mib_per_step"),
                     expected_gather_scatter_bytes(sequence_parallel == "on") / (1 << 20))
        << "sequence parallel " << sequence_parallel;
    EXPECT_GT(rehearsal.step_ms, 0.0);
    EXPECT_GT(rehearsal.step_bytes, 0.0);
    EXPECT_LT(rehearsal.step_bytes, single_bytes) << "sequence parallel " << sequence_parallel;
    // Its rank 0's shards, as a real rank 0 holds them.
    auto rank = asked.create();
    rank->setup([&spec](torch::Device) { return make_case_model(spec.config); }, {torch::kCPU}, spec.config);
    EXPECT_EQ(rank->describe().at("backend"), "rehearsal");
    auto whole = make_case_model(spec.config);
    const auto shards = rank->model().module().named_parameters();
    const auto wholes = whole->module().named_parameters();
    ASSERT_EQ(shards.size(), wholes.size());
    for (size_t i = 0; i < shards.size(); ++i) {
      const auto expected = take_shard(wholes[i].value(), gpt_shard_kind(wholes[i].key()), 0, 2);
      EXPECT_EQ(shards[i].value().sizes(), expected.sizes()) << shards[i].key();
    }
  }
}

// On a GPU the rehearsed rank is captured in a CUDA graph and replayed, as --advise profiles a
// graphed case: its stand-in collectives are local copies, which a graph captures.
TEST(TensorParallel, ARehearsedRankIsCapturedAndReplayedOnAGpu) {
  if (visible_gpu_count() < 1) GTEST_SKIP() << "needs a GPU, 0 visible";
  const auto spec = tinygpt_case("tensor_parallel", "on");
  ProfileRequest request;
  spec.strategy->predictor().request(CaseConditions{spec.config, spec.global_batch, 2, 2, true}, request);
  ASSERT_EQ(request.rehearsals.size(), 1u);
  const auto rehearsal = rehearse(request.rehearsals.begin()->second, torch::Device(torch::kCUDA, 0), /*graphed=*/true);
  EXPECT_GT(rehearsal.step_ms, 0.0);
  EXPECT_GT(rehearsal.step_bytes, 0.0);
  EXPECT_DOUBLE_EQ(rehearsal.counters.at("tp_comm_mib_per_step"), expected_comm_bytes(true) / (1 << 20));
}

// --advise's step: the rehearsed rank's step plus its collectives, counted back from their
// tallied ring bytes into activation-sized collectives: the all-reduces at the time of one
// all-reduce of a (T, N, d) activation of the whole batch, the all-gathers and reduce-scatters at
// the mean of one of each; none of it hidden. Memory: its shards' states by formula, and what the
// rehearsed step allocated above them.
TEST(TensorParallel, PredictsTheRehearsedRankPlusItsCollectivesAtTheProfiledRate) {
  const auto spec = tinygpt_case("tensor_parallel", "off");
  const auto& info = *spec.strategy;
  const auto& config = spec.config;
  ASSERT_EQ(config.batch_size, 3);  // each rank's share
  const CaseConditions conditions{config, /*named_batch=*/6, /*devices=*/2, /*visible_gpus=*/2, /*cuda_graph=*/false};
  ASSERT_TRUE(info.predicts(conditions));
  EXPECT_TRUE(info.predictor().needs_gpu_per_device);
  ProfileRequest request;
  info.predictor().request(conditions, request);
  EXPECT_TRUE(request.ranks.empty());
  // One of each collective of an activation of the whole batch, 6 x 16 x 32 fp32 values.
  const int64_t whole = 6 * 16 * 32 * 4;
  const CollectiveMessage all_reduce{CollectiveKind::kAllReduce, whole, c10::ScalarType::Float};
  const CollectiveMessage all_gather{CollectiveKind::kAllGather, whole, c10::ScalarType::Float};
  const CollectiveMessage reduce_scatter{CollectiveKind::kReduceScatter, whole, c10::ScalarType::Float};
  EXPECT_EQ(request.collectives, (std::set<CollectiveMessage>{all_reduce, all_gather, reduce_scatter}));
  ASSERT_EQ(request.rehearsals.size(), 1u);
  EXPECT_EQ(request.rehearsals.begin()->second.config.batch_size, 3);
  AdviseProfile profile;
  profile.single_step_ms = 10;  // not read
  profile.collective_ms = {{all_reduce, 0.5}, {all_gather, 0.2}, {reduce_scatter, 0.4}};
  const auto& key = request.rehearsals.begin()->first;
  // 3 MiB of ring bytes on 2 ranks, 1 MiB of them gathered or scattered.
  const auto rehearsed = [](double ring_mib, double gather_scatter_mib) {
    return Rehearsal{/*step_ms=*/7.0, /*step_bytes=*/5e5,
                     {{"tp_comm_mib_per_step", ring_mib}, {"tp_gather_scatter_mib_per_step", gather_scatter_mib}}};
  };
  profile.rehearsals[key] = rehearsed(3.0, 1.0);
  // On 2 ranks an all-reduce tallies 2 (w-1)/w = 1 times the whole, an all-gather or a
  // reduce-scatter 1/2 of it: 2 MiB are 2 MiB / whole all-reduces, 1 MiB is 2 MiB / whole
  // gathers or scatters at (0.2 + 0.4) / 2 ms.
  const double mib = 1 << 20;
  const auto prediction = info.predictor().predict(profile, conditions);
  EXPECT_NEAR(prediction.step_ms, 7.0 + 2.0 * mib / whole * 0.5 + 2.0 * mib / whole * 0.3, 1e-9);
  EXPECT_EQ(prediction.profile, "rehearsal");
  // On 4 ranks an all-reduce tallies 2 (w-1)/w = 3/2 times the whole, a gather or scatter 3/4.
  const CaseConditions four{config, /*named_batch=*/6, /*devices=*/4, /*visible_gpus=*/4, /*cuda_graph=*/false};
  ProfileRequest four_request;
  info.predictor().request(four, four_request);
  ASSERT_EQ(four_request.rehearsals.size(), 1u);
  EXPECT_NE(four_request.rehearsals.begin()->first, key);
  profile.rehearsals[four_request.rehearsals.begin()->first] = rehearsed(3.0, 1.0);
  EXPECT_NEAR(info.predictor().predict(profile, four).step_ms,
              7.0 + 2.0 * mib / (1.5 * whole) * 0.5 + 1.0 * mib / (0.75 * whole) * 0.3, 1e-9);
  // Without any of the three timed, no time.
  for (const auto& message : {all_reduce, all_gather, reduce_scatter}) {
    auto untimed = profile;
    untimed.collective_ms.erase(message);
    EXPECT_THROW(info.predictor().predict(untimed, conditions), std::invalid_argument) << to_string(message.kind);
  }

  profile.memory = profile_memory({config}, torch::kCPU);
  const auto memory = info.predictor().memory(profile, conditions).devices;
  ASSERT_EQ(memory.size(), 2u);
  std::vector<torch::Tensor> held;
  for (size_t i = 0; i < profile.memory.parameters.size(); ++i) {
    const auto& whole = profile.memory.parameters[i];
    held.push_back(gpt_shard_kind(profile.memory.parameter_names[i]) == ShardKind::kReplicated
                       ? whole
                       : torch::empty({whole.numel() / 2}, whole.options()));
  }
  const auto states = model_states_of(held, config.optimizer);
  const double batch = profile.memory.inputs.at(3) + profile.memory.targets.at(3);
  EXPECT_DOUBLE_EQ(memory[0].peak(), states.parameters + states.optimizer_state + batch + 5e5);
  EXPECT_EQ(memory[0].peak(), memory[1].peak());

  // Without its rehearsal: no time, and the memory by Megatron-LM's per-layer count.
  profile.rehearsals.clear();
  EXPECT_THROW(info.predictor().predict(profile, conditions), std::invalid_argument);
  const auto counted = info.predictor().memory(profile, conditions).devices.front();
  EXPECT_FALSE(counted.fresh_gradients);
  EXPECT_GT(counted.activations, 0.0);
}

// --tp-halves=on cases are not predicted (their memory is): on 2 H200s the overlap model put them
// 19% (graphed) and 36% (eager) below the measured step. Their rehearsal key names the halves, and
// the refusal names the rehearsed compute.
TEST(TensorParallel, HalvesCasesAreNotPredictedButTheirMemoryIs) {
  auto specs = build_cases(parsed_options({"--strategies=tensor_parallel", "--models=tinygpt", "--gpus=2",
                                           "--batch=" + std::to_string(kBatch), "--seq=" + std::to_string(kSeq),
                                           "--tp-halves=on"},
                                          /*has_gpu=*/false),
                           /*visible_gpus=*/2);
  ASSERT_EQ(specs.size(), 1u);
  const auto& info = *specs.front().strategy;
  const CaseConditions conditions{specs.front().config, /*named_batch=*/6, /*devices=*/2, /*visible_gpus=*/2, false};
  ProfileRequest request;
  info.predictor().request(conditions, request);
  EXPECT_TRUE(request.collectives.empty());  // nothing to price
  ASSERT_EQ(request.rehearsals.size(), 1u);
  EXPECT_NE(request.rehearsals.begin()->first.find("/halves:on"), std::string::npos);
  AdviseProfile profile;
  const int64_t whole = 6 * 16 * 32 * 4;
  for (const auto kind : {CollectiveKind::kAllReduce, CollectiveKind::kAllGather, CollectiveKind::kReduceScatter}) {
    profile.collective_ms[{kind, whole, c10::ScalarType::Float}] = 0.5;
  }
  profile.rehearsals[request.rehearsals.begin()->first] =
      Rehearsal{/*step_ms=*/7.0, /*step_bytes=*/5e5, {{"tp_comm_mib_per_step", 3.0}, {"tp_gather_scatter_mib_per_step", 1.0}}};
  try {
    info.predictor().predict(profile, conditions);
    ADD_FAILURE() << "a halves case was predicted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("--tp-halves=on"), std::string::npos) << error.what();
    // The rehearsed compute, measured, is still said: a floor under the step.
    EXPECT_NE(std::string(error.what()).find("compute alone, rehearsed with nothing sent, took 7.00 ms"),
              std::string::npos)
        << error.what();
  }
  profile.memory = profile_memory({specs.front().config}, torch::kCPU);
  EXPECT_GT(info.predictor().memory(profile, conditions).devices.front().peak(), 5e5);
}

}  // namespace
}  // namespace parbench
