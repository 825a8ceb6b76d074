// Pipelined model parallelism: the batch is cut into micro-batches of `split_size`, so that
// while stage k works on micro-batch i, stage k-1 already works on micro-batch i+1.
//
// Schedules (RunConfig::schedule):
//   tutorial  forward as a wavefront, outputs concatenated, one loss and one backward through
//             autograd, as PyTorch's model-parallel tutorial does.
//   gpipe     all forwards as a wavefront, then one backward per micro-batch, last first.
//   1f1b      forwards of the first `stages` micro-batches, then one backward and one forward
//             in turn, so no more than `stages` micro-batches hold activations.
// On CUDA each stage computes on its own stream; activations travel to the next device on a
// send stream of the source and a receive stream of the destination, ordered with events, so
// copies overlap the neighbouring stages' compute instead of queueing behind it.
#include "strategies/partition.h"
#include "strategies/strategy.h"
#include "strategies/training.h"

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <deque>
#include <optional>
#include <stdexcept>

namespace parbench {
namespace {

const std::vector<std::string> kSchedules = {"tutorial", "gpipe", "1f1b"};

// Per-stage compute and send streams on CUDA; on the CPU every call is a plain pass-through.
class StageStreams {
 public:
  explicit StageStreams(const std::vector<Partition>& partitions) {
    for (const auto& partition : partitions) devices_.push_back(partition.device);
#ifdef PARBENCH_WITH_CUDA
    if (!devices_.front().is_cuda()) return;
    for (const auto& device : devices_) {
      compute_.push_back(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
      send_.push_back(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
      receive_.push_back(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
    }
#endif
  }

  // Runs `work` with stage `s`'s compute stream current on its device.
  template <typename Work>
  auto on_compute(size_t s, Work&& work) {
#ifdef PARBENCH_WITH_CUDA
    if (!compute_.empty()) {
      c10::cuda::CUDAStreamGuard guard(compute_[s]);
      return work();
    }
#endif
    return work();
  }

  // Copies stage s's output to stage s+1's device.
  torch::Tensor send(size_t s, const torch::Tensor& y) {
    const auto& destination = devices_[s + 1];
#ifdef PARBENCH_WITH_CUDA
    if (!compute_.empty()) {
      at::cuda::CUDAEvent computed;
      computed.record(compute_[s]);
      computed.block(send_[s]);
      // The copy reads y on the send stream: keep its memory until that stream is done.
      c10::cuda::CUDACachingAllocator::recordStream(y.storage().data_ptr(), send_[s]);
      torch::Tensor received;
      {
        // PyTorch copies across devices on the source's current stream, after a barrier with
        // the destination's current stream, which then waits for the copy. With the receive
        // stream current there, the barrier does not wait for stage s+1's queued compute.
        c10::cuda::CUDAMultiStreamGuard guard(std::vector<c10::cuda::CUDAStream>{send_[s], receive_[s + 1]});
        received = y.to(destination, /*non_blocking=*/true);
      }
      at::cuda::CUDAEvent arrived;
      arrived.record(receive_[s + 1]);
      arrived.block(compute_[s + 1]);
      c10::cuda::CUDACachingAllocator::recordStream(received.storage().data_ptr(), compute_[s + 1]);
      return received;
    }
#endif
    return y.to(destination);
  }

  // The stage streams wait for the work already queued on each device's current stream.
  void begin_step() {
#ifdef PARBENCH_WITH_CUDA
    for (size_t s = 0; s < compute_.size(); ++s) {
      at::cuda::CUDAEvent ready;
      ready.record(c10::cuda::getCurrentCUDAStream(devices_[s].index()));
      for (const auto& stream : {compute_[s], send_[s], receive_[s]}) ready.block(stream);
    }
#endif
  }

  // Each device's current stream waits for everything its stage streams ran.
  void end_step() {
#ifdef PARBENCH_WITH_CUDA
    for (size_t s = 0; s < compute_.size(); ++s) {
      const auto current = c10::cuda::getCurrentCUDAStream(devices_[s].index());
      for (const auto& stream : {compute_[s], send_[s], receive_[s]}) {
        at::cuda::CUDAEvent done;
        done.record(stream);
        done.block(current);
      }
    }
#endif
  }

 private:
  std::vector<torch::Device> devices_;
#ifdef PARBENCH_WITH_CUDA
  std::vector<c10::cuda::CUDAStream> compute_, send_, receive_;
#endif
};

class Pipeline final : public Strategy {
 public:
  void setup(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
             const RunConfig& config) override {
    if (config.split_size <= 0) {
      throw std::invalid_argument("split_size must be a positive number of images, got " +
                                  std::to_string(config.split_size));
    }
    if (std::find(kSchedules.begin(), kSchedules.end(), config.schedule) == kSchedules.end()) {
      throw std::invalid_argument("unknown pipeline schedule '" + config.schedule + "' (allowed: tutorial, gpipe, 1f1b)");
    }
    TORCH_CHECK(devices.size() >= 2, "pipeline needs at least 2 devices, got ", devices.size());
    for (size_t i = 0; devices.front().is_cuda() && i < devices.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (devices[i] == devices[j]) throw std::invalid_argument("pipeline stages need distinct GPUs");
      }
    }
    devices_ = devices;
    config_ = config;
    model_ = make_model();
    partitions_ = partition_model(*model_, devices, config, std::min(config.split_size, config.batch_size), &cut_);
    streams_.emplace(partitions_);
    optimizer_ = make_sgd(*model_, config.learning_rate);
  }

  torch::Device input_device() const override { return partitions_.front().device; }
  torch::Device target_device() const override { return partitions_.back().device; }

  torch::Tensor train_step(const Batch& batch) override {
    optimizer_->zero_grad();
    streams_->begin_step();
    const auto inputs = batch.inputs.split(config_.split_size);
    const auto targets = batch.targets.split(config_.split_size);
    const auto batch_size = static_cast<double>(batch.inputs.size(0));
    const size_t last = partitions_.size() - 1;

    // The loss of micro-batch m, weighted so the micro-batch losses add up to the batch mean.
    const auto micro_loss = [&](size_t m, const torch::Tensor& output) {
      return streams_->on_compute(last, [&] {
        return compute_loss(output, targets[m], config_.loss) * (targets[m].size(0) / batch_size);
      });
    };

    // Detached micro-batch losses, summed once the device streams have joined.
    std::vector<torch::Tensor> losses;
    const auto backward = [&](size_t m, const torch::Tensor& output) {
      auto part = micro_loss(m, output);
      part.backward();
      losses.push_back(part.detach());
    };
    if (config_.schedule == "tutorial") {
      auto outputs = forward_wavefront(inputs, 0, inputs.size());
      auto loss = streams_->on_compute(last, [&] { return compute_loss(torch::cat(outputs), batch.targets, config_.loss); });
      loss.backward();
      losses.push_back(loss.detach());
    } else if (config_.schedule == "gpipe") {
      auto outputs = forward_wavefront(inputs, 0, inputs.size());
      for (size_t m = outputs.size(); m-- > 0;) backward(m, outputs[m]);
    } else {  // 1f1b
      std::deque<std::pair<size_t, torch::Tensor>> in_flight;
      const size_t warmup = std::min(partitions_.size(), inputs.size());
      auto first = forward_wavefront(inputs, 0, warmup);
      for (size_t m = 0; m < warmup; ++m) in_flight.emplace_back(m, first[m]);
      for (size_t next = warmup; !in_flight.empty();) {
        backward(in_flight.front().first, in_flight.front().second);
        in_flight.pop_front();
        if (next < inputs.size()) {
          in_flight.emplace_back(next, forward_wavefront(inputs, next, next + 1).front());
          ++next;
        }
      }
    }
    streams_->end_step();
    optimizer_->step();
    return torch::stack(losses).sum();
  }

  std::map<std::string, std::string> describe() const override {
    return {{"cut", format_cut(cut_)}, {"schedule", config_.schedule}};
  }

 private:
  // Forwards micro-batches [begin, end) through all stages: at tick t stage s works on
  // micro-batch begin + t - s, later stages issued first, as in the tutorial.
  std::vector<torch::Tensor> forward_wavefront(const std::vector<torch::Tensor>& inputs, size_t begin, size_t end) {
    const size_t stages = partitions_.size();
    const size_t count = end - begin;
    std::vector<torch::Tensor> handoff(stages);  // handoff[s]: stage s's output waiting for stage s+1
    std::vector<torch::Tensor> outputs;
    for (size_t tick = 0; tick + 1 < count + stages; ++tick) {
      for (size_t s = stages; s-- > 0;) {
        if (tick < s || tick - s >= count) continue;
        const auto& input = s == 0 ? inputs[begin + tick] : handoff[s - 1];
        auto y = streams_->on_compute(s, [&] {
          AutocastScope autocast(partitions_[s].device.type(), model_->autocast_dtype());
          return partitions_[s].forward(input);
        });
        if (s + 1 < stages) {
          handoff[s] = streams_->send(s, y);
        } else {
          outputs.push_back(y);
        }
      }
    }
    return outputs;
  }

  RunConfig config_;
  std::vector<Partition> partitions_;
  Cut cut_;
  std::optional<StageStreams> streams_;
  std::unique_ptr<torch::optim::SGD> optimizer_;
};

PARBENCH_REGISTER_STRATEGY({"pipeline", "stages split across devices, micro-batches of split_size in flight",
                            /*order=*/2, /*min_devices=*/2, /*distributed=*/false,
                            [] { return std::make_unique<Pipeline>(); }});

}  // namespace
}  // namespace parbench
