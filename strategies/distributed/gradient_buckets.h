// Gradient averaging as PyTorch's DistributedDataParallel does it, with autograd hooks
// instead of c10d's Reducer (simpler, and the part being measured stays in view):
// - parameters are packed in reverse order (the order backward produces their gradients)
//   into flat buckets of about `bucket_mib` MiB;
// - a hook on every parameter counts its gradient in; when a bucket's last gradient arrives,
//   all of the bucket's gradients are copied into it at once (one multi-tensor copy: a copy
//   per parameter would be ~160 small kernels per step). On GPUs the copy runs on a stream of
//   its own: it is memory-bound, and on the compute stream it would hold up backward;
// - a bucket's all-reduce starts when its last gradient has arrived (overlap on), or all
//   start after backward (overlap off: what the overlap buys is then measurable);
// - buckets start in index order on every rank, as collectives must.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include <optional>
#include <vector>

namespace parbench {

// The buckets, as the indices of `parameters` each holds: in reverse order, about `bucket_mib`
// MiB each, one dtype and device per bucket, a parameter larger than that alone in one.
// Buckets are listed in the order their all-reduces start.
std::vector<std::vector<size_t>> plan_buckets(const std::vector<torch::Tensor>& parameters, double bucket_mib);

class GradientBuckets {
 public:
  GradientBuckets(std::vector<torch::Tensor> parameters, c10::intrusive_ptr<c10d::Backend> backend, double bucket_mib,
                  bool overlap);
  ~GradientBuckets();  // removes the hooks
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // Before backward: forgets the last step's gradients.
  void prepare();
  // After backward: starts the buckets not started yet, waits for every all-reduce, and
  // makes each parameter's grad its slice of its bucket: the mean over ranks. A parameter
  // that got no gradient counts as zero, as in DistributedDataParallel.
  void finish();

  size_t bucket_count() const { return buckets_.size(); }

 private:
  struct Bucket {
    torch::Tensor flat;
    std::vector<size_t> members;  // parameter indices
    size_t pending = 0;           // gradients still to arrive this step
    c10::intrusive_ptr<c10d::Work> work;
  };
  struct Slot {
    size_t bucket = 0;
    int64_t offset = 0;
    torch::Tensor view;  // the parameter's place in its bucket, shaped and strided like it
    bool ready = false;   // its gradient arrived, or finish() found it had none
    bool unused = false;  // no gradient this step: its view was zeroed
  };

  void on_gradient(size_t index, const torch::Tensor& gradient);
  // Copies the bucket's gradients into it: the parameters' grads, or `last` for `last_index`,
  // whose grad autograd has not set yet (hooks run before the gradient is accumulated).
  void fill_bucket(size_t bucket, size_t last_index, const torch::Tensor& last);
  // All-reduces launched from the fill stream, where there is one, so that they wait for the fills.
  void start_ready_buckets();

  std::vector<torch::Tensor> parameters_;
  std::vector<Slot> slots_;  // per parameter
  std::vector<Bucket> buckets_;
  std::vector<unsigned> hooks_;
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::optional<c10::Stream> fill_stream_;  // GPUs only
  bool overlap_;
  size_t next_to_start_ = 0;
};

}  // namespace parbench
