// A c10d Backend for one rank's step rehearsed alone on one device (--advise's profile of a
// strategy whose ranks each run their own slice of the model: tensor_parallel): rank 0 of a world
// of `size` whose collectives send nothing and complete at once, so that the rank computes
// exactly what it would, on tensors of the shapes and dtypes the real collectives leave (their
// outputs are the caller's). The values are not the real ones: an all-reduce leaves its tensors
// as they are; an all-gather or a reduce-scatter leaves a floating-point output as the caller
// allocated it, unwritten, so that the rehearsed step holds no copy the real one does not make
// (the collective's time is priced apart), and fills an integer one (token ids, which index an
// embedding) from the input: every rank's place with it, or its first chunk. The strategy's own
// tally counts the bytes the real collectives move.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <vector>

namespace parbench {

class RehearsalBackend final : public c10d::Backend {
 public:
  explicit RehearsalBackend(int size);

  const std::string getBackendName() const override { return "rehearsal"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& options = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& options = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& options = c10d::BarrierOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& options = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& options = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& options = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& options = c10d::ReduceScatterOptions()) override;
};

}  // namespace parbench
