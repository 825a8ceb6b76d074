#include "strategies/distributed/gradient_buckets.h"

#include <ATen/record_function.h>

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace parbench {

std::vector<std::vector<size_t>> plan_buckets(const std::vector<torch::Tensor>& parameters, double bucket_mib) {
  TORCH_CHECK(bucket_mib > 0, "bucket size must be positive, got ", bucket_mib, " MiB");
  const double capacity_bytes = bucket_mib * 1024.0 * 1024.0;
  std::vector<std::vector<size_t>> members;
  double bucket_bytes = 0;
  for (size_t index = parameters.size(); index-- > 0;) {
    const auto& parameter = parameters[index];
    const double bytes = static_cast<double>(parameter.numel()) * parameter.element_size();
    const bool fits = !members.empty() && bucket_bytes + bytes <= capacity_bytes &&
                      parameters[members.back().front()].scalar_type() == parameter.scalar_type() &&
                      parameters[members.back().front()].device() == parameter.device();
    if (!fits) {
      members.emplace_back();
      bucket_bytes = 0;
    }
    members.back().push_back(index);
    bucket_bytes += bytes;
  }
  return members;
}

GradientBuckets::GradientBuckets(std::vector<torch::Tensor> parameters, c10::intrusive_ptr<c10d::Backend> backend,
                                 double bucket_mib, bool overlap)
    : parameters_(std::move(parameters)), slots_(parameters_.size()), backend_(std::move(backend)), overlap_(overlap) {
  const auto members = plan_buckets(parameters_, bucket_mib);
  for (size_t b = 0; b < members.size(); ++b) {
    int64_t numel = 0;
    for (size_t index : members[b]) {
      slots_[index].bucket = b;
      slots_[index].offset = numel;
      numel += parameters_[index].numel();
    }
    Bucket bucket;
    bucket.flat = torch::empty({numel}, parameters_[members[b].front()].options());
    bucket.members = members[b];
    // Views made once: per-step narrow/view calls cost host time, and the host sets the pace.
    // Each view has its parameter's strides (channels-last stays channels-last).
    for (size_t index : members[b]) {
      const auto& parameter = parameters_[index];
      TORCH_CHECK(parameter.is_non_overlapping_and_dense(), "ddp needs dense parameters; parameter ", index,
                  " is not");
      slots_[index].view = bucket.flat.narrow(0, slots_[index].offset, parameter.numel())
                               .as_strided(parameter.sizes(), parameter.strides());
    }
    buckets_.push_back(std::move(bucket));
  }

  const auto device = parameters_.front().device();
  if (device.is_cuda()) fill_stream_ = c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device);

  for (size_t index = 0; index < parameters_.size(); ++index) {
    hooks_.push_back(parameters_[index].register_hook(
        [this, index](const torch::Tensor& gradient) { on_gradient(index, gradient); }));
  }
}

GradientBuckets::~GradientBuckets() {
  for (size_t index = 0; index < hooks_.size(); ++index) parameters_[index].remove_hook(hooks_[index]);
}

void GradientBuckets::prepare() {
  for (auto& parameter : parameters_) parameter.mutable_grad().reset();
  for (auto& slot : slots_) slot.ready = slot.unused = false;
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.members.size();
    bucket.work.reset();
  }
  next_to_start_ = 0;
}

void GradientBuckets::on_gradient(size_t index, const torch::Tensor& gradient) {
  auto& slot = slots_[index];
  TORCH_CHECK(!slot.ready, "parameter ", index, " got a second gradient in one backward; ddp expects one");
  slot.ready = true;
  // Until its bucket is full, a gradient waits as its parameter's grad.
  if (--buckets_[slot.bucket].pending > 0) return;
  fill_bucket(slot.bucket, index, gradient);
  if (overlap_) start_ready_buckets();
}

void GradientBuckets::fill_bucket(size_t bucket, size_t last_index, const torch::Tensor& last) {
  torch::NoGradGuard no_grad;
  std::optional<c10::StreamGuard> on_fill_stream;
  if (fill_stream_) {
    // After the gradients (and finish()'s zeroed views). The gradients stay alive until the
    // next prepare(), which comes after finish() made the compute stream wait for the
    // all-reduces, and so for the fills before them.
    c10::Event gradients_ready(fill_stream_->device_type());
    gradients_ready.record(c10::impl::VirtualGuardImpl(fill_stream_->device_type()).getStream(fill_stream_->device()));
    fill_stream_->wait(gradients_ready);
    on_fill_stream.emplace(*fill_stream_);
  }
  std::vector<torch::Tensor> views, gradients;
  for (size_t index : buckets_[bucket].members) {
    if (slots_[index].unused) continue;
    const auto& gradient = index == last_index ? last : parameters_[index].grad();
    TORCH_CHECK(gradient.defined(), "parameter ", index, "'s gradient arrived but was not accumulated before its bucket filled");
    views.push_back(slots_[index].view);
    gradients.push_back(gradient);
  }
  if (!views.empty()) at::_foreach_copy_(views, gradients);
}

void GradientBuckets::start_ready_buckets() {
  c10d::AllreduceOptions average;
  average.reduceOp = c10d::ReduceOp::AVG;  // the mean inside the collective (ncclAvg): no pass of its own
  std::optional<c10::StreamGuard> on_fill_stream;
  if (fill_stream_) on_fill_stream.emplace(*fill_stream_);
  while (next_to_start_ < buckets_.size() && buckets_[next_to_start_].pending == 0) {
    RECORD_USER_SCOPE("all-reduce bucket" + std::to_string(next_to_start_));
    auto& bucket = buckets_[next_to_start_++];
    std::vector<at::Tensor> tensors{bucket.flat};
    bucket.work = backend_->allreduce(tensors, average);
  }
}

void GradientBuckets::finish() {
  torch::NoGradGuard no_grad;
  for (size_t index = 0; index < parameters_.size(); ++index) {
    if (slots_[index].ready) continue;
    slots_[index].view.zero_();
    slots_[index].ready = slots_[index].unused = true;
    if (--buckets_[slots_[index].bucket].pending == 0) fill_bucket(slots_[index].bucket, index, {});
  }
  start_ready_buckets();
  for (auto& bucket : buckets_) bucket.work->wait();
  for (size_t index = 0; index < parameters_.size(); ++index) parameters_[index].mutable_grad() = slots_[index].view;
}

}  // namespace parbench
