#include "benchmarks/advise/advise_memory.h"

#include "benchmarks/measure/memory.h"

#include "benchmarks/config/test_hooks.h"
#include "strategies/optimizer.h"
#include "strategies/training.h"

#include <c10/core/CPUAllocator.h>

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <limits>
#include <stdexcept>

namespace parbench {
namespace {

// The CPU allocator, counted: what it allocates is kept by address with its size until its
// deleter runs. The address is the DataPtr's context too, as raw_allocate (oneDNN's buffers) needs.
// One instance for the process, never destroyed, since tensors it allocated may outlive any counter.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    auto inner = base_->allocate(bytes);
    void* data = inner.get();
    const auto device = inner.device();
    if (data == nullptr) return {nullptr, nullptr, &release, device};  // nothing to count or free
    {
      std::lock_guard<std::mutex> lock(mutex_);
      current_ += static_cast<int64_t>(bytes);
      peak_ = std::max(peak_, current_);
      live_.emplace(data, Allocation{std::move(inner), bytes});
    }
    return {data, data, &release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* destination, const void* source, std::size_t count) const override {
    default_copy_data(destination, source, count);
  }

  void install() {
    TORCH_CHECK(base_ == nullptr, "only one CPU allocation counter at a time");
    base_ = c10::GetCPUAllocator();
    c10::SetCPUAllocator(this, kPriority);
  }
  // Allocations made meanwhile stay counted until freed; they free through the wrapped allocator.
  void uninstall() {
    c10::SetCPUAllocator(base_, kPriority);
    base_ = nullptr;
  }
  int64_t current() {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_;
  }
  int64_t peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = current_;
  }

  static CountingCpuAllocator& instance() {
    static auto* counting = new CountingCpuAllocator();
    return *counting;
  }

 private:
  // Above any other registration, so that the counter is the one used while installed.
  static constexpr uint8_t kPriority = std::numeric_limits<uint8_t>::max();

  struct Allocation {
    c10::DataPtr inner;
    size_t bytes;
  };
  static void release(void* data) {
    if (data == nullptr) return;
    auto& self = instance();
    c10::DataPtr freed;  // freed once the lock is released
    {
      std::lock_guard<std::mutex> lock(self.mutex_);
      const auto found = self.live_.find(data);
      if (found == self.live_.end()) return;
      self.current_ -= static_cast<int64_t>(found->second.bytes);
      freed = std::move(found->second.inner);
      self.live_.erase(found);
    }
  }

  c10::Allocator* base_ = nullptr;
  std::mutex mutex_;
  int64_t current_ = 0, peak_ = 0;
  std::unordered_map<void*, Allocation> live_;
};

void synchronize(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// Fitted through two measurements at kMemoryProfileSizes.
LinearBytes linear(double small, double large) {
  const auto small_size = static_cast<double>(kMemoryProfileSizes.front());
  const auto large_size = static_cast<double>(kMemoryProfileSizes.back());
  LinearBytes bytes;
  bytes.per_sample = (large - small) / (large_size - small_size);
  bytes.fixed = small - bytes.per_sample * small_size;
  return bytes;
}

void place(const Stage& stage, torch::Device device) {
  for (const auto& module : stage.modules) module->to(device);
}

// Every stage's memory under `config` (its checkpointing), one stage on `device` at a time.
std::vector<StageMemory> measure_stages(StagedModel& model, const RunConfig& config, torch::Device device) {
  model.set_checkpoint_blocks(config.checkpoint == Checkpointing::kBlocks);
  prepare_model(model, config.precision);
  const auto stages = model.stages();
  // Per stage, per size: kept, output, backward.
  std::vector<std::vector<double>> kept(stages.size()), output(stages.size()), backward(stages.size());
  for (auto size : kMemoryProfileSizes) {
    const auto batch = make_random_batch(config, size, device, device);
    torch::Tensor activation = batch.inputs;
    for (size_t s = 0; s < stages.size(); ++s) {
      const bool last = s + 1 == stages.size();
      place(stages[s], device);
      const auto input = s == 0 ? activation : activation.detach().requires_grad_();
      const auto forward = [&] {
        AutocastScope autocast(device.type(), model.autocast_dtype());
        const auto out = stages[s].forward(input);
        return last ? compute_loss(out, batch.targets, config.loss) : out;
      };
      const auto run_backward = [&](const torch::Tensor& root) {
        if (last) {
          root.backward();
        } else {
          root.backward(torch::randn_like(root));
        }
      };
      run_backward(forward());  // untimed: the stage's gradients and the library's workspaces made
      torch::Tensor next;
      {
        AllocationCounter counter(device);
        const double before_forward = counter.current();
        auto root = forward();
        const double after_forward = counter.current();
        kept[s].push_back(after_forward - before_forward);
        output[s].push_back(last ? 0.0 : static_cast<double>(tensor_bytes(root)));
        counter.reset_peak();
        run_backward(root);
        backward[s].push_back(counter.peak() - after_forward);
        if (!last) next = root.detach();
      }
      for (const auto& module : stages[s].modules) {
        for (auto& parameter : module->parameters()) parameter.mutable_grad().reset();
      }
      if (device != torch::Device(torch::kCPU)) place(stages[s], torch::kCPU);
      activation = next;
    }
  }
  std::vector<StageMemory> memory;
  for (size_t s = 0; s < stages.size(); ++s) {
    memory.push_back({linear(kept[s].front(), kept[s].back()), linear(output[s].front(), output[s].back()),
                      linear(backward[s].front(), backward[s].back())});
  }
  return memory;
}

}  // namespace

AllocationCounter::AllocationCounter(torch::Device device) : device_(device) {
  if (device_.is_cuda()) {
#ifdef PARBENCH_WITH_CUDA
    synchronize(device_);
    c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
#endif
    return;
  }
  if (!device_.is_cpu()) throw std::invalid_argument("allocations are counted on CPUs and GPUs, not " + device_.str());
  CountingCpuAllocator::instance().install();
  CountingCpuAllocator::instance().reset_peak();
}

AllocationCounter::~AllocationCounter() {
  if (device_.is_cpu()) CountingCpuAllocator::instance().uninstall();
}

double AllocationCounter::current() const {
  synchronize(device_);
  if (device_.is_cuda()) return allocator_stats({device_}).front().allocated;
  return static_cast<double>(CountingCpuAllocator::instance().current());
}

double AllocationCounter::peak() const {
  synchronize(device_);
  if (device_.is_cuda()) return allocator_stats({device_}).front().peak_allocated;
  return static_cast<double>(CountingCpuAllocator::instance().peak());
}

void AllocationCounter::reset_peak() {
  synchronize(device_);
#ifdef PARBENCH_WITH_CUDA
  if (device_.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index());
    return;
  }
#endif
  CountingCpuAllocator::instance().reset_peak();
}

MemoryProfile profile_memory(const std::vector<RunConfig>& configs, torch::Device device) {
  if (configs.empty()) throw std::invalid_argument("a memory profile needs at least one case's config");
  const auto& first = configs.front();
  MemoryProfile memory;
  auto model = make_model(first.model, first.num_classes);
  const auto stages = model->stages();
  std::map<const c10::TensorImpl*, size_t> stage_of;
  for (size_t s = 0; s < stages.size(); ++s) {
    memory.stage_names.push_back(stages[s].name);
    for (const auto& module : stages[s].modules) {
      for (const auto& parameter : module->parameters()) stage_of.emplace(parameter.unsafeGetTensorImpl(), s);
    }
  }
  memory.stage_groups = model->stage_groups();
  for (const auto& item : model->module().named_parameters()) {
    const auto& parameter = item.value();
    const auto found = stage_of.find(parameter.unsafeGetTensorImpl());
    if (found == stage_of.end()) {
      throw std::invalid_argument(first.model + "'s parameter " + item.key() + " is in none of its stages");
    }
    memory.parameters.push_back(torch::empty(parameter.sizes(), parameter.options().device(torch::kMeta)));
    memory.parameter_names.push_back(item.key());
    memory.parameter_stage.push_back(found->second);
  }
  std::vector<double> inputs, targets;
  for (auto size : kMemoryProfileSizes) {
    const auto batch = make_random_batch(first, size, torch::kCPU, torch::kCPU);
    inputs.push_back(static_cast<double>(tensor_bytes(batch.inputs)));
    targets.push_back(static_cast<double>(tensor_bytes(batch.targets)));
  }
  memory.inputs = linear(inputs.front(), inputs.back());
  memory.targets = linear(targets.front(), targets.back());
  for (const auto& config : configs) memory.stages[config.checkpoint] = measure_stages(*model, config, device);
  memory.device_bytes = device_capacity_bytes(device);
  return memory;
}

double device_capacity_bytes(torch::Device device) {
  if (const auto gib = test_hooks::device_gib()) return *gib * 1024.0 * 1024.0 * 1024.0;
#ifdef PARBENCH_WITH_CUDA
  if (device.is_cuda()) return static_cast<double>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
#endif
  (void)device;
  return 0;
}

}  // namespace parbench
