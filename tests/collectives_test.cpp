// The store backend's all-gather and reduce-scatter (what sharded strategies run on CPU ranks in
// CI), on ranks that are threads of this process sharing one store: worlds of 1, 2 and 3, shards
// of uneven length, each reduce-scatter's chunk bitwise the all-reduce's, and a rank that never
// comes named in the error. And the rehearsal backend, which sends nothing: the shapes a real
// collective leaves, on one rank.
#include "strategies/distributed/rehearsal_backend.h"
#include "strategies/distributed/store_backend.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace parbench {
namespace {

using namespace std::chrono_literals;

// Runs `body(rank, backend)` on `world` threads, each with its own StoreBackend over one store;
// rethrows the first rank's exception.
void on_ranks(int world, const std::function<void(int rank, c10d::Backend& backend)>& body,
              std::chrono::milliseconds timeout = 10s) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        StoreBackend backend(c10::make_intrusive<c10d::PrefixStore>("backend", store), rank, world, timeout);
        body(rank, backend);
        backend.shutdown();
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& error : errors)
    if (error) std::rethrow_exception(error);
}

// Rank r's values: distinct per rank and element, and not exactly representable sums, so that
// the order of additions shows in the bits.
torch::Tensor rank_values(int rank, int64_t elements) {
  return torch::arange(elements, torch::kFloat32).mul(0.1f).add(static_cast<float>(rank) / 3.0f);
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllGatherPutsEveryRanksShardInRankOrder) {
  const int world = GetParam();
  constexpr int64_t kShard = 5;  // odd, so shards are not aligned to anything
  on_ranks(world, [&](int rank, c10d::Backend& backend) {
    auto input = rank_values(rank, kShard);
    auto output = torch::full({world * kShard}, -1.0f);
    backend._allgather_base(output, input)->wait();
    for (int from = 0; from < world; ++from) {
      EXPECT_TRUE(torch::equal(output.narrow(0, from * kShard, kShard), rank_values(from, kShard)))
          << "rank " << rank << " holds rank " << from << "'s shard wrong";
    }
  });
}

TEST_P(Collectives, ReduceScatterChunksAreBitwiseTheAllReducesSlices) {
  const int world = GetParam();
  constexpr int64_t kChunk = 7;
  for (const auto op : {c10d::ReduceOp::SUM, c10d::ReduceOp::AVG}) {
    on_ranks(world, [&](int rank, c10d::Backend& backend) {
      auto input = rank_values(rank, world * kChunk);
      std::vector<at::Tensor> reduced{input.clone()};
      c10d::AllreduceOptions all_reduce;
      all_reduce.reduceOp = op;
      backend.allreduce(reduced, all_reduce)->wait();

      auto output = torch::empty({kChunk});
      c10d::ReduceScatterOptions scatter;
      scatter.reduceOp = op;
      backend._reduce_scatter_base(output, input, scatter)->wait();
      EXPECT_TRUE(torch::equal(output, reduced.front().narrow(0, rank * kChunk, kChunk)))
          << "rank " << rank << (op == c10d::ReduceOp::SUM ? " sum" : " average");
      // And the sum is the ranks' inputs added, not something merely consistent with itself.
      auto expected = torch::zeros({kChunk});
      for (int from = 0; from < world; ++from) expected += rank_values(from, world * kChunk).narrow(0, rank * kChunk, kChunk);
      if (op == c10d::ReduceOp::AVG) expected /= world;
      EXPECT_TRUE(torch::allclose(output, expected, 1e-6, 1e-6)) << "rank " << rank;
    });
  }
}

TEST_P(Collectives, CoalescedCallsDoEachPairInOrder) {
  const int world = GetParam();
  on_ranks(world, [&](int rank, c10d::Backend& backend) {
    std::vector<at::Tensor> shards{rank_values(rank, 3), rank_values(rank, 2).to(torch::kFloat64)};
    std::vector<at::Tensor> gathered{torch::empty({world * 3}), torch::empty({world * 2}, torch::kFloat64)};
    backend.allgather_into_tensor_coalesced(gathered, shards)->wait();
    for (int from = 0; from < world; ++from) {
      EXPECT_TRUE(torch::equal(gathered[0].narrow(0, from * 3, 3), rank_values(from, 3)));
      EXPECT_TRUE(torch::equal(gathered[1].narrow(0, from * 2, 2), rank_values(from, 2).to(torch::kFloat64)));
    }
    std::vector<at::Tensor> chunks{torch::empty({4}), torch::empty({1}, torch::kFloat64)};
    std::vector<at::Tensor> wholes{torch::ones({world * 4}).mul(rank + 1), torch::ones({world}, torch::kFloat64)};
    backend.reduce_scatter_tensor_coalesced(chunks, wholes)->wait();
    EXPECT_TRUE(torch::equal(chunks[0], torch::full({4}, world * (world + 1) / 2.0f)));
    EXPECT_TRUE(torch::equal(chunks[1], torch::full({1}, static_cast<double>(world), torch::kFloat64)));
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, Collectives, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) { return std::to_string(info.param) + "ranks"; });

// An all-gather of a shard of 3 elements into a whole tensor of 5, refused with what it needs.
void expect_mismatch_refused(c10d::Backend& backend) {
  auto input = torch::zeros({3});
  auto output = torch::zeros({5});
  const auto needed = std::to_string(backend.getSize()) + " (the world size) times the shard's 3 elements";
  try {
    backend._allgather_base(output, input);
    ADD_FAILURE() << "an output of 5 elements for " << backend.getSize() << " shards of 3 was taken";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what_without_backtrace()).find(needed), std::string::npos)
        << error.what_without_backtrace();
  }
}

TEST(CollectiveShapes, AMismatchSaysWhatTheWholeTensorNeeds) {
  on_ranks(2, [](int, c10d::Backend& backend) { expect_mismatch_refused(backend); });
}

TEST(CollectiveTimeout, ARankThatNeverComesIsNamed) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  StoreBackend backend(c10::make_intrusive<c10d::PrefixStore>("backend", store), /*rank=*/0, /*size=*/2, 300ms);
  auto input = torch::zeros({2});
  auto output = torch::zeros({4});
  auto work = backend._allgather_base(output, input);
  try {
    work->wait();
    ADD_FAILURE() << "an all-gather finished without rank 1";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("rank 1 did not reach all-gather #0"), std::string::npos) << error.what();
  }
}

// Rank 0 of 3 alone: every collective has finished when it returns. An all-gather of integers
// (token ids) repeats the input in every rank's place and a reduce-scatter keeps its first
// chunk; floating-point outputs are left as the caller allocated them, and an all-reduce and a
// broadcast leave their tensors as they were. A whole tensor of the wrong size is refused.
TEST(RehearsalBackend, LeavesTheShapesARealCollectiveWouldWithoutSending) {
  RehearsalBackend backend(3);
  EXPECT_EQ(backend.getRank(), 0);
  EXPECT_EQ(backend.getSize(), 3);
  auto shard = torch::arange(4, torch::kLong);
  auto whole = torch::full({12}, -1, torch::kLong);
  auto work = backend._allgather_base(whole, shard);
  EXPECT_TRUE(work->isCompleted());
  EXPECT_TRUE(torch::equal(whole, shard.repeat({3})));
  auto two_d = torch::zeros({3, 4}, torch::kLong);  // a whole tensor of any shape with 3 shards' elements
  backend._allgather_base(two_d, shard);
  EXPECT_TRUE(torch::equal(two_d, shard.repeat({3, 1})));
  auto float_whole = torch::full({12}, -1.0f);
  auto float_shard = torch::arange(4, torch::kFloat);
  EXPECT_TRUE(backend._allgather_base(float_whole, float_shard)->isCompleted());
  EXPECT_TRUE(torch::equal(float_whole, torch::full({12}, -1.0f)));  // unwritten

  auto scattered = torch::full({4}, -1, torch::kLong);
  auto input = torch::arange(12, torch::kLong);
  EXPECT_TRUE(backend._reduce_scatter_base(scattered, input)->isCompleted());
  EXPECT_TRUE(torch::equal(scattered, torch::arange(4, torch::kLong)));
  auto float_scattered = torch::full({4}, -1.0f);
  auto float_input = torch::arange(12, torch::kFloat);
  backend._reduce_scatter_base(float_scattered, float_input);
  EXPECT_TRUE(torch::equal(float_scattered, torch::full({4}, -1.0f)));  // unwritten

  std::vector<at::Tensor> tensors{torch::arange(5, torch::kFloat)};
  EXPECT_TRUE(backend.allreduce(tensors)->wait());
  EXPECT_TRUE(torch::equal(tensors.front(), torch::arange(5, torch::kFloat)));
  EXPECT_TRUE(backend.broadcast(tensors)->isCompleted());
  EXPECT_TRUE(backend.barrier()->isCompleted());

  std::vector<at::Tensor> outputs{torch::zeros({6}, torch::kLong), torch::zeros({3}, torch::kLong)},
      inputs{torch::ones({2}, torch::kLong), torch::full({1}, 7, torch::kLong)};
  backend.allgather_into_tensor_coalesced(outputs, inputs);
  EXPECT_TRUE(torch::equal(outputs[0], torch::ones({6}, torch::kLong)));
  EXPECT_TRUE(torch::equal(outputs[1], torch::full({3}, 7, torch::kLong)));
  inputs = {torch::zeros({2}, torch::kLong), torch::zeros({1}, torch::kLong)};
  backend.reduce_scatter_tensor_coalesced(inputs, outputs);
  EXPECT_TRUE(torch::equal(inputs[0], torch::ones({2}, torch::kLong)));
  EXPECT_TRUE(torch::equal(inputs[1], torch::full({1}, 7, torch::kLong)));
  expect_mismatch_refused(backend);
}

}  // namespace
}  // namespace parbench
