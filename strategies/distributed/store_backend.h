// A c10d Backend that all-reduces, broadcasts and barriers through a c10d Store (TCPStore
// across processes). LibTorch's wheel ships no Gloo headers, so this is what ddp runs on where
// there is no GPU: the same DDP code as on GPUs, only the backend differs. Slow but exact:
// every rank adds the contributions in rank order, so all ranks get bitwise the same sum.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace parbench {

class StoreBackend final : public c10d::Backend {
 public:
  // `store` must be private to this backend (a PrefixStore): keys are numbered per operation.
  StoreBackend(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout);
  ~StoreBackend() override;

  const std::string getBackendName() const override { return "store"; }

  // Operations run in order on one background thread, so an all-reduce started during
  // backward overlaps with it as NCCL's would. CPU tensors only; SUM and AVG.
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& options = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& options = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& options = c10d::BarrierOptions()) override;

  // Finishes the queued operations and stops the thread.
  void shutdown() override;

 private:
  class StoreWork;

  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::function<void()> operation);
  void run_queue();
  const at::Tensor& single_cpu_tensor(const std::vector<at::Tensor>& tensors, const char* operation) const;
  void all_reduce(const at::Tensor& tensor, bool average, uint64_t sequence);
  void broadcast_from(const at::Tensor& tensor, int root, uint64_t sequence);
  void barrier_all(uint64_t sequence);

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  uint64_t next_sequence_ = 0;  // operations are numbered in call order, the same on every rank

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<c10::intrusive_ptr<StoreWork>, std::function<void()>>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace parbench
