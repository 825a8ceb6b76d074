#include "strategies/distributed/store_backend.h"

#include "strategies/distributed/store_sync.h"

#include <torch/torch.h>

#include <algorithm>

namespace parbench {
namespace {

// TCPStore's libuv server (the default) refuses values over 8 MiB: a tensor goes through the
// store in chunks of at most this many bytes.
constexpr size_t kChunkBytes = 4 << 20;

// The keys a tensor of `bytes` bytes goes under: <key>/0, <key>/1, ... for its chunks, and
// `key` itself, set last to the byte count, so that whoever sees `key` can read every chunk.
std::vector<std::string> tensor_keys(const std::string& key, size_t bytes) {
  std::vector<std::string> keys;
  for (size_t chunk = 0; chunk * kChunkBytes < std::max<size_t>(bytes, 1); ++chunk) {
    keys.push_back(key + "/" + std::to_string(chunk));
  }
  keys.push_back(key);
  return keys;
}

void set_tensor(c10d::Store& store, const std::string& key, const at::Tensor& contiguous) {
  const auto* data = static_cast<const uint8_t*>(contiguous.data_ptr());
  const size_t bytes = contiguous.nbytes();
  const auto keys = tensor_keys(key, bytes);
  for (size_t chunk = 0; chunk + 1 < keys.size(); ++chunk) {
    const size_t begin = chunk * kChunkBytes, end = std::min(bytes, begin + kChunkBytes);
    store.set(keys[chunk], std::vector<uint8_t>(data + begin, data + end));
  }
  const auto size_text = std::to_string(bytes);
  store.set(key, std::vector<uint8_t>(size_text.begin(), size_text.end()));
}

// Reads what set_tensor set under `key` (already there) into a new tensor shaped like `like`;
// `mismatch(bytes)` says why when its byte count differs from `like`'s.
at::Tensor get_tensor(c10d::Store& store, const std::string& key, const at::Tensor& like,
                      const std::function<std::string(size_t bytes)>& mismatch) {
  const auto size_text = store.get(key);
  const size_t bytes = std::stoull(std::string(size_text.begin(), size_text.end()));
  TORCH_CHECK(bytes == like.nbytes(), mismatch(bytes));
  auto tensor = torch::empty(like.sizes(), like.options().memory_format(c10::MemoryFormat::Contiguous));
  auto* data = static_cast<uint8_t*>(tensor.data_ptr());
  const auto keys = tensor_keys(key, bytes);
  for (size_t chunk = 0; chunk + 1 < keys.size(); ++chunk) {
    const auto received = store.get(keys[chunk]);
    std::copy(received.begin(), received.end(), data + chunk * kChunkBytes);
  }
  return tensor;
}

}  // namespace

class StoreBackend::StoreWork final : public c10d::Work {
 public:
  StoreWork(int rank, c10d::OpType type) : Work(rank, type) {}
  void complete(std::exception_ptr error) { finish(std::move(error)); }
};

StoreBackend::StoreBackend(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout)
    : Backend(rank, size), store_(std::move(store)), timeout_(timeout) {
  worker_ = std::thread([this] { run_queue(); });
  init();
}

StoreBackend::~StoreBackend() { shutdown(); }

void StoreBackend::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

c10::intrusive_ptr<c10d::Work> StoreBackend::enqueue(c10d::OpType type, std::function<void()> operation) {
  auto work = c10::make_intrusive<StoreWork>(rank_, type);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stopping_, "the store backend was shut down");
    queue_.emplace_back(work, std::move(operation));
  }
  wake_.notify_all();
  return work;
}

void StoreBackend::run_queue() {
  while (true) {
    std::pair<c10::intrusive_ptr<StoreWork>, std::function<void()>> next;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to finish
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      next.second();
    } catch (const std::runtime_error& failure) {
      // A sub-group's ranks are numbered within it: its note says which ranks of the run they are.
      error = group_note_.empty() ? std::current_exception()
                                  : std::make_exception_ptr(std::runtime_error(failure.what() + group_note_));
    } catch (...) {
      error = std::current_exception();
    }
    next.first->complete(error);
  }
}

const at::Tensor& StoreBackend::single_cpu_tensor(const std::vector<at::Tensor>& tensors, const char* operation) const {
  TORCH_CHECK(tensors.size() == 1, "the store backend's ", operation, " takes one tensor, got ", tensors.size());
  TORCH_CHECK(tensors.front().device().is_cpu(), "the store backend's ", operation,
              " works on CPU tensors (use nccl on GPUs), got one on ", tensors.front().device());
  return tensors.front();
}

c10::intrusive_ptr<c10d::Work> StoreBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::AllreduceOptions& options) {
  const auto op = options.reduceOp.op_;
  TORCH_CHECK(op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::AVG,
              "the store backend's all-reduce supports SUM and AVG only");
  const at::Tensor tensor = single_cpu_tensor(tensors, "all-reduce");
  const uint64_t sequence = next_sequence_++;
  const bool average = op == c10d::ReduceOp::AVG;
  return enqueue(c10d::OpType::ALLREDUCE,
                 [this, tensor, average, sequence] { all_reduce(tensor, average, sequence); });
}

c10::intrusive_ptr<c10d::Work> StoreBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                       const c10d::BroadcastOptions& options) {
  const at::Tensor tensor = single_cpu_tensor(tensors, "broadcast");
  const int root = static_cast<int>(options.rootRank);
  TORCH_CHECK(root >= 0 && root < size_, "broadcast root ", root, " is not a rank of ", size_);
  const uint64_t sequence = next_sequence_++;
  return enqueue(c10d::OpType::BROADCAST, [this, tensor, root, sequence] { broadcast_from(tensor, root, sequence); });
}

c10::intrusive_ptr<c10d::Work> StoreBackend::barrier(const c10d::BarrierOptions& /*options*/) {
  const uint64_t sequence = next_sequence_++;
  return enqueue(c10d::OpType::BARRIER, [this, sequence] { barrier_all(sequence); });
}

void StoreBackend::check_pair(const at::Tensor& large, const at::Tensor& small, const char* operation) const {
  TORCH_CHECK(large.device().is_cpu() && small.device().is_cpu(), "the store backend's ", operation,
              " works on CPU tensors (use nccl on GPUs), got ", large.device(), " and ", small.device());
  TORCH_CHECK(large.scalar_type() == small.scalar_type(), "the store backend's ", operation, " takes one dtype, got ",
              large.scalar_type(), " and ", small.scalar_type());
  TORCH_CHECK(large.is_contiguous(), "the store backend's ", operation, " needs a contiguous whole tensor");
  TORCH_CHECK(large.numel() == small.numel() * size_, "the store backend's ", operation, " needs ", size_,
              " (the world size) times the shard's ", small.numel(), " elements in the whole tensor, got ",
              large.numel());
}

c10::intrusive_ptr<c10d::Work> StoreBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                             const c10d::AllgatherOptions& /*options*/) {
  check_pair(output, input, "all-gather");
  const uint64_t sequence = next_sequence_++;
  return enqueue(c10d::OpType::_ALLGATHER_BASE,
                 [this, output, input, sequence] { all_gather(output, input, sequence); });
}

c10::intrusive_ptr<c10d::Work> StoreBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                             std::vector<at::Tensor>& inputs,
                                                                             const c10d::AllgatherOptions& /*options*/) {
  TORCH_CHECK(outputs.size() == inputs.size(), "the store backend's coalesced all-gather takes as many outputs as inputs, got ",
              outputs.size(), " and ", inputs.size());
  std::vector<uint64_t> sequences;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_pair(outputs[i], inputs[i], "all-gather");
    sequences.push_back(next_sequence_++);
  }
  return enqueue(c10d::OpType::COALESCED, [this, outputs, inputs, sequences] {
    for (size_t i = 0; i < inputs.size(); ++i) all_gather(outputs[i], inputs[i], sequences[i]);
  });
}

c10::intrusive_ptr<c10d::Work> StoreBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::ReduceScatterOptions& options) {
  const auto op = options.reduceOp.op_;
  TORCH_CHECK(op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::AVG,
              "the store backend's reduce-scatter supports SUM and AVG only");
  check_pair(input, output, "reduce-scatter");
  const uint64_t sequence = next_sequence_++;
  const bool average = op == c10d::ReduceOp::AVG;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE,
                 [this, output, input, average, sequence] { reduce_scatter(output, input, average, sequence); });
}

c10::intrusive_ptr<c10d::Work> StoreBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                             std::vector<at::Tensor>& inputs,
                                                                             const c10d::ReduceScatterOptions& options) {
  const auto op = options.reduceOp.op_;
  TORCH_CHECK(op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::AVG,
              "the store backend's reduce-scatter supports SUM and AVG only");
  TORCH_CHECK(outputs.size() == inputs.size(), "the store backend's coalesced reduce-scatter takes as many outputs as inputs, got ",
              outputs.size(), " and ", inputs.size());
  std::vector<uint64_t> sequences;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_pair(inputs[i], outputs[i], "reduce-scatter");
    sequences.push_back(next_sequence_++);
  }
  const bool average = op == c10d::ReduceOp::AVG;
  return enqueue(c10d::OpType::COALESCED, [this, outputs, inputs, average, sequences] {
    for (size_t i = 0; i < inputs.size(); ++i) reduce_scatter(outputs[i], inputs[i], average, sequences[i]);
  });
}

void StoreBackend::for_each_part(const std::string& prefix, const at::Tensor& mine, const std::string& operation,
                                 const std::function<void(int rank, const at::Tensor& part)>& take,
                                 std::vector<std::string>& keys) {
  for (int rank = 0; rank < size_; ++rank) {
    const auto key = prefix + std::to_string(rank);
    for (auto& written : tensor_keys(key, mine.nbytes())) keys.push_back(std::move(written));
    if (rank == rank_) {
      take(rank, mine);
      continue;
    }
    take(rank, get_tensor(*store_, key, mine, [&](size_t bytes) {
           return "rank " + std::to_string(rank) + " sent " + std::to_string(bytes) + " bytes to " + operation +
                  ", rank " + std::to_string(rank_) + " " + std::to_string(mine.nbytes()) + ": the ranks' tensors differ";
         }));
  }
}

at::Tensor StoreBackend::sum_in_rank_order(const std::string& prefix, const at::Tensor& mine, const std::string& operation,
                                           bool average, std::vector<std::string>& keys) {
  // Rank order, on every rank: the sums are bitwise equal everywhere.
  at::Tensor sum;
  for_each_part(prefix, mine, operation, [&](int rank, const at::Tensor& part) {
    if (rank == 0) {
      sum = part.clone();
    } else {
      sum.add_(part);
    }
  }, keys);
  if (average) sum.div_(size_);
  return sum;
}

void StoreBackend::all_reduce(const at::Tensor& tensor, bool average, uint64_t sequence) {
  const std::string prefix = "allreduce/" + std::to_string(sequence) + "/";
  const std::string operation = "all-reduce #" + std::to_string(sequence);
  const at::Tensor mine = tensor.contiguous();
  set_tensor(*store_, prefix + std::to_string(rank_), mine);
  wait_for_ranks(*store_, prefix, size_, timeout_, "reach " + operation);
  std::vector<std::string> keys;
  tensor.copy_(sum_in_rank_order(prefix, mine, operation, average, keys));
  release_keys(*store_, prefix + "read", size_, keys);
}

void StoreBackend::all_gather(const at::Tensor& output, const at::Tensor& input, uint64_t sequence) {
  const std::string prefix = "allgather/" + std::to_string(sequence) + "/";
  const std::string operation = "all-gather #" + std::to_string(sequence);
  const at::Tensor mine = input.contiguous();
  set_tensor(*store_, prefix + std::to_string(rank_), mine);
  wait_for_ranks(*store_, prefix, size_, timeout_, "reach " + operation);
  const auto shards = output.view({size_, -1});
  std::vector<std::string> keys;
  for_each_part(prefix, mine, operation, [&](int rank, const at::Tensor& part) { shards[rank].copy_(part.view(-1)); },
                keys);
  release_keys(*store_, prefix + "read", size_, keys);
}

void StoreBackend::reduce_scatter(const at::Tensor& output, const at::Tensor& input, bool average, uint64_t sequence) {
  // Chunk <d> of each rank's input goes under reducescatter/<seq>/<d>/<rank>, read by rank d alone.
  const std::string prefix = "reducescatter/" + std::to_string(sequence) + "/";
  const std::string operation = "reduce-scatter #" + std::to_string(sequence);
  const auto chunks = input.contiguous().view({size_, -1});
  for (int destination = 0; destination < size_; ++destination) {
    set_tensor(*store_, prefix + std::to_string(destination) + "/" + std::to_string(rank_),
               chunks[destination].contiguous());
  }
  const std::string mine = prefix + std::to_string(rank_) + "/";
  wait_for_ranks(*store_, mine, size_, timeout_, "reach " + operation);
  // Added in rank order, as all_reduce adds: each chunk is bitwise the all-reduce's.
  std::vector<std::string> keys;
  output.copy_(sum_in_rank_order(mine, chunks[rank_], operation, average, keys).view_as(output));
  release_keys(*store_, mine + "read", 1, keys);
}

void StoreBackend::broadcast_from(const at::Tensor& tensor, int root, uint64_t sequence) {
  const std::string key = "broadcast/" + std::to_string(sequence);
  if (rank_ == root) {
    set_tensor(*store_, key, tensor.contiguous());
    return;
  }
  wait_for_rank(*store_, key, root, timeout_, "reach broadcast #" + std::to_string(sequence));
  tensor.copy_(get_tensor(*store_, key, tensor, [&](size_t bytes) {
    return "rank " + std::to_string(root) + " broadcast " + std::to_string(bytes) + " bytes, rank " +
           std::to_string(rank_) + " expected " + std::to_string(tensor.nbytes()) + ": the ranks' tensors differ";
  }));
  release_keys(*store_, key + "/read", size_ - 1, tensor_keys(key, tensor.nbytes()));
}

void StoreBackend::barrier_all(uint64_t sequence) {
  const std::string prefix = "barrier/" + std::to_string(sequence) + "/";
  store_->set(prefix + std::to_string(rank_), std::vector<uint8_t>{1});
  wait_for_ranks(*store_, prefix, size_, timeout_, "reach barrier #" + std::to_string(sequence));
  std::vector<std::string> keys;
  for (int rank = 0; rank < size_; ++rank) keys.push_back(prefix + std::to_string(rank));
  release_keys(*store_, prefix + "read", size_, keys);
}

}  // namespace parbench
