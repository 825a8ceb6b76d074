#include "strategies/distributed/rehearsal_backend.h"

namespace parbench {
namespace {

// A collective that has already finished: its outputs were written on the caller's stream.
class DoneWork final : public c10d::Work {
 public:
  explicit DoneWork(c10d::OpType type) : Work(/*rank=*/0, type) { finish(); }
};

c10::intrusive_ptr<c10d::Work> done(c10d::OpType type) { return c10::make_intrusive<DoneWork>(type); }

void check_pair(const at::Tensor& whole, const at::Tensor& shard, int size, const char* operation) {
  TORCH_CHECK(whole.numel() == shard.numel() * size, "a rehearsed ", operation, " needs ", size,
              " (the world size) times the shard's ", shard.numel(), " elements in the whole tensor, got ",
              whole.numel());
}

// An integer whole tensor with `shard` in every rank's place; a floating-point one unwritten.
void gather_into(at::Tensor& whole, const at::Tensor& shard, int size) {
  check_pair(whole, shard, size, "all-gather");
  if (at::isFloatingType(whole.scalar_type())) return;
  whole.view({size, shard.numel()}).copy_(shard.reshape({1, shard.numel()}).expand({size, shard.numel()}));
}

// An integer shard: rank 0's chunk of `whole`, as if no other rank had added to it; a
// floating-point one unwritten.
void scatter_into(at::Tensor& shard, const at::Tensor& whole, int size) {
  check_pair(whole, shard, size, "reduce-scatter");
  if (at::isFloatingType(shard.scalar_type())) return;
  shard.view({shard.numel()}).copy_(whole.reshape({whole.numel()}).narrow(0, 0, shard.numel()));
}

}  // namespace

RehearsalBackend::RehearsalBackend(int size) : Backend(/*rank=*/0, size) {
  TORCH_CHECK(size >= 1, "a rehearsal needs a world of at least one rank, got ", size);
  init();
}

c10::intrusive_ptr<c10d::Work> RehearsalBackend::allreduce(std::vector<at::Tensor>& /*tensors*/,
                                                           const c10d::AllreduceOptions& /*options*/) {
  return done(c10d::OpType::ALLREDUCE);
}

c10::intrusive_ptr<c10d::Work> RehearsalBackend::broadcast(std::vector<at::Tensor>& /*tensors*/,
                                                           const c10d::BroadcastOptions& /*options*/) {
  return done(c10d::OpType::BROADCAST);
}

c10::intrusive_ptr<c10d::Work> RehearsalBackend::barrier(const c10d::BarrierOptions& /*options*/) {
  return done(c10d::OpType::BARRIER);
}

c10::intrusive_ptr<c10d::Work> RehearsalBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions& /*options*/) {
  gather_into(output, input, size_);
  return done(c10d::OpType::_ALLGATHER_BASE);
}

c10::intrusive_ptr<c10d::Work> RehearsalBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& /*options*/) {
  scatter_into(output, input, size_);
  return done(c10d::OpType::_REDUCE_SCATTER_BASE);
}

c10::intrusive_ptr<c10d::Work> RehearsalBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& /*options*/) {
  TORCH_CHECK(outputs.size() == inputs.size(), "a rehearsed coalesced all-gather takes as many outputs as inputs");
  for (size_t i = 0; i < inputs.size(); ++i) gather_into(outputs[i], inputs[i], size_);
  return done(c10d::OpType::COALESCED);
}

c10::intrusive_ptr<c10d::Work> RehearsalBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& /*options*/) {
  TORCH_CHECK(outputs.size() == inputs.size(), "a rehearsed coalesced reduce-scatter takes as many outputs as inputs");
  for (size_t i = 0; i < inputs.size(); ++i) scatter_into(outputs[i], inputs[i], size_);
  return done(c10d::OpType::COALESCED);
}

}  // namespace parbench
