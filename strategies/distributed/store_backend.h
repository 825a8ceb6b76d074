// A c10d Backend that all-reduces, all-gathers, reduce-scatters, broadcasts and barriers through
// a c10d Store (TCPStore across processes). LibTorch's wheel ships no Gloo headers, so this is what ddp runs on where
// there is no GPU: the same DDP code as on GPUs, only the backend differs. Slow but exact:
// every rank adds the contributions in rank order, so all ranks get bitwise the same sum.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

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
  // `output` (contiguous) gets every rank's `input` in rank order: output.numel() is world size
  // times input.numel(), of the same dtype.
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& options = c10d::AllgatherOptions()) override;
  // `output` gets chunk <rank> of the ranks' `input`s summed (or averaged), in rank order as the
  // all-reduce adds: bitwise that all-reduce's slice. input.numel() is world size times
  // output.numel(). SUM and AVG.
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& options = c10d::ReduceScatterOptions()) override;
  // One of the above per pair of tensors, in order, as one operation.
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& options = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& options = c10d::ReduceScatterOptions()) override;

  // Finishes the queued operations and stops the thread.
  void shutdown() override;
  // Appended to a failed operation's message: for a sub-group, which of the run's ranks its ranks
  // are (" in the tp group, whose ranks 0, 1 are the run's ranks 2 (dp=1,tp=0), 3 (dp=1,tp=1)").
  void set_group_note(std::string note) { group_note_ = std::move(note); }

 private:
  class StoreWork;

  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::function<void()> operation);
  void run_queue();
  const at::Tensor& single_cpu_tensor(const std::vector<at::Tensor>& tensors, const char* operation) const;
  void all_reduce(const at::Tensor& tensor, bool average, uint64_t sequence);
  void broadcast_from(const at::Tensor& tensor, int root, uint64_t sequence);
  void all_gather(const at::Tensor& output, const at::Tensor& input, uint64_t sequence);
  // Each rank's part set under `prefix`<rank> (this rank's: `mine`, not read back), shaped like
  // `mine`, to `take` in rank order; the keys read are added to `keys` for release_keys.
  void for_each_part(const std::string& prefix, const at::Tensor& mine, const std::string& operation,
                     const std::function<void(int rank, const at::Tensor& part)>& take, std::vector<std::string>& keys);
  // Those parts added in rank order (bitwise the same on every rank), averaged if asked.
  at::Tensor sum_in_rank_order(const std::string& prefix, const at::Tensor& mine, const std::string& operation,
                               bool average, std::vector<std::string>& keys);
  void reduce_scatter(const at::Tensor& output, const at::Tensor& input, bool average, uint64_t sequence);
  // Checks a gather's or scatter's pair of tensors: CPU, one dtype, `large` world size times `small`.
  void check_pair(const at::Tensor& large, const at::Tensor& small, const char* operation) const;
  void barrier_all(uint64_t sequence);

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  std::string group_note_;
  uint64_t next_sequence_ = 0;  // operations are numbered in call order, the same on every rank

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<c10::intrusive_ptr<StoreWork>, std::function<void()>>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace parbench
