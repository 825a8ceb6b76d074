// How a sharded strategy (zero) lays a group of tensors out flat and splits it across ranks:
// the tensors back to back in their order, the total padded up to a multiple of the world size,
// and rank r owning the contiguous shard [r * shard, (r + 1) * shard). The padding sits at the
// end, in the last ranks' shards, and is never any tensor's. Pure arithmetic on element counts,
// so it is tested without processes (tests/zero_test.cpp).
#pragma once

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace parbench {

// A piece of one tensor that lies in a rank's shard.
struct ShardPiece {
  size_t tensor = 0;         // index in the group
  int64_t tensor_offset = 0;  // first element, within the tensor (flattened)
  int64_t shard_offset = 0;   // where it lies within the shard
  int64_t length = 0;
};

class FlatShardLayout {
 public:
  FlatShardLayout() = default;
  // `numels`: each tensor's element count, in flat order; `world`: the ranks sharing it.
  FlatShardLayout(const std::vector<int64_t>& numels, int world) : numels_(numels), world_(world) {
    TORCH_CHECK(world >= 1, "a flat shard layout needs at least 1 rank, got ", world);
    int64_t offset = 0;
    for (const auto numel : numels_) {
      TORCH_CHECK(numel >= 0, "a tensor cannot have ", numel, " elements");
      offsets_.push_back(offset);
      offset += numel;
    }
    used_ = offset;
    shard_ = (used_ + world - 1) / world;
    // An empty group still gets one element per rank: collectives of zero elements are no-ops
    // some backends refuse.
    if (shard_ == 0) shard_ = 1;
  }

  int world() const { return world_; }
  size_t tensors() const { return numels_.size(); }
  int64_t numel(size_t tensor) const { return numels_.at(tensor); }
  int64_t offset(size_t tensor) const { return offsets_.at(tensor); }
  // Elements the tensors take, and with the padding.
  int64_t used() const { return used_; }
  int64_t padded() const { return shard_ * world_; }
  int64_t padding() const { return padded() - used_; }
  // Elements each rank owns (the same on every rank, padding included).
  int64_t shard() const { return shard_; }
  int64_t shard_begin(int rank) const {
    check_rank(rank);
    return shard_ * rank;
  }

  // The pieces of the tensors in `rank`'s shard, in flat order; the shard's elements after the
  // last piece are padding.
  std::vector<ShardPiece> pieces(int rank) const {
    const int64_t begin = shard_begin(rank), end = begin + shard_;
    std::vector<ShardPiece> found;
    for (size_t t = 0; t < numels_.size(); ++t) {
      const int64_t first = std::max(begin, offsets_[t]);
      const int64_t last = std::min(end, offsets_[t] + numels_[t]);
      if (first >= last) continue;
      found.push_back({t, first - offsets_[t], first - begin, last - first});
    }
    return found;
  }

 private:
  void check_rank(int rank) const {
    TORCH_CHECK(rank >= 0 && rank < world_, "rank ", rank, " is not in a world of ", world_);
  }

  std::vector<int64_t> numels_;
  std::vector<int64_t> offsets_;
  int world_ = 1;
  int64_t used_ = 0;
  int64_t shard_ = 1;
};

}  // namespace parbench
