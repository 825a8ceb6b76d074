#include "benchmarks/advise/advise_memory.h"

#include "benchmarks/advise/fit.h"
#include "benchmarks/measure/device_stats.h"
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
#include <array>
#include <functional>
#include <set>
#include <string>
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

void place(const Stage& stage, torch::Device device) {
  for (const auto& module : stage.modules) module->to(device);
}

void add_sample(StageMemory& memory, int64_t size, const std::array<double, 3>& measured) {
  for (auto* bytes : {&memory.kept, &memory.output, &memory.backward}) bytes->sizes.push_back(size);
  memory.kept.values.push_back(measured[0]);
  memory.output.values.push_back(measured[1]);
  memory.backward.values.push_back(measured[2]);
}

struct PieceMemory {
  std::array<double, 3> bytes;  // kept, output, backward
  torch::Tensor root;           // the measured forward's result, detached: the next piece's input
};

// One piece of work's memory on `device`: run once untimed and unmeasured (its gradients and the
// library's workspaces made), then what its forward leaves allocated, its root's bytes where
// `output` (its output, for a later stage to take) and the most its backward allocates above what
// the forward left.
PieceMemory measure_piece(torch::Device device, const std::function<torch::Tensor()>& forward,
                          const std::function<void(const torch::Tensor&)>& backward, bool output) {
  backward(forward());
  AllocationCounter counter(device);
  const double before_forward = counter.current();
  auto root = forward();
  const double after_forward = counter.current();
  const double output_bytes = output ? static_cast<double>(tensor_bytes(root)) : 0.0;
  counter.reset_peak();
  backward(root);
  return {{after_forward - before_forward, output_bytes, counter.peak() - after_forward}, root.detach()};
}

struct StagesMeasured {
  std::vector<StageMemory> stages;
  LossApart loss_apart;
};

// Every stage's memory under `config` (its checkpointing), one stage on `device` at a time, at
// each of `sizes` (ascending); the last stage also without its loss, and the loss alone. A size
// that runs out of memory ends the measuring there: the stages are then known up to the size
// before it, and beyond it along their last two sizes.
StagesMeasured measure_stages(StagedModel& model, const RunConfig& config, torch::Device device,
                              const std::vector<int64_t>& sizes) {
  model.set_checkpoint_blocks(config.checkpoint == Checkpointing::kBlocks);
  prepare_model(model, config.precision);
  const auto stages = model.stages();
  StagesMeasured memory;
  memory.stages.resize(stages.size());
  const auto release_stage = [&](size_t s) {
    for (const auto& module : stages[s].modules) {
      for (auto& parameter : module->parameters()) parameter.mutable_grad().reset();
    }
    if (device != torch::Device(torch::kCPU)) place(stages[s], torch::kCPU);
  };
  const auto backward_from_random = [](const torch::Tensor& root) { root.backward(torch::randn_like(root)); };
  const auto backward_from_loss = [](const torch::Tensor& root) { root.backward(); };
  for (auto size : sizes) {
    // At this size, per stage, then the last stage without its loss and the loss alone: kept,
    // output, backward; added to `memory` once every piece has them.
    std::vector<std::array<double, 3>> measured;
    try {
      const auto batch = make_random_batch(config, size, device, device);
      torch::Tensor activation = batch.inputs;
      for (size_t s = 0; s < stages.size(); ++s) {
        const bool last = s + 1 == stages.size();
        place(stages[s], device);
        const auto input = s == 0 ? activation : activation.detach().requires_grad_();
        const auto stage_forward = [&] {
          AutocastScope autocast(device.type(), model.autocast_dtype());
          return stages[s].forward(input);
        };
        if (!last) {
          auto piece = measure_piece(device, stage_forward, backward_from_random, /*output=*/true);
          measured.push_back(piece.bytes);
          activation = piece.root;
        } else {
          // The loss outside autocast, as the strategies take it.
          const auto with_loss = [&] { return compute_loss(stage_forward(), batch.targets, config.loss); };
          measured.push_back(measure_piece(device, with_loss, backward_from_loss, /*output=*/false).bytes);
          auto without_loss = measure_piece(device, stage_forward, backward_from_random, /*output=*/true);
          measured.push_back(without_loss.bytes);
          // The loss over outputs gathered into one tensor, as data_parallel takes it on device 0.
          const auto output = without_loss.root.requires_grad_();
          const auto loss_alone = [&] { return compute_loss(torch::cat({output}), batch.targets, config.loss); };
          measured.push_back(measure_piece(device, loss_alone, backward_from_loss, /*output=*/false).bytes);
        }
        release_stage(s);
      }
    } catch (const std::exception& error) {
      // Too large for the device: the sizes measured so far stand, if there are two.
      if (!is_out_of_memory(error.what()) || memory.stages.front().kept.sizes.size() < 2) throw;
      for (size_t s = 0; s < stages.size(); ++s) release_stage(s);
      release_cached_memory();
      break;
    }
    for (size_t s = 0; s < stages.size(); ++s) add_sample(memory.stages[s], size, measured[s]);
    add_sample(memory.loss_apart.last_stage, size, measured[stages.size()]);
    add_sample(memory.loss_apart.loss, size, measured[stages.size() + 1]);
  }
  return memory;
}

}  // namespace

AllocationCounter::AllocationCounter(torch::Device device) : device_(device) {
  if (device_.is_cuda()) {
    synchronize(device_);
    // Through reset_peak_memory, which initialises CUDA first: before a process's first allocation
    // the caching allocator rejects every device ("Invalid device argument").
    reset_peak_memory({device_});
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
  if (device_.is_cuda()) {
    reset_peak_memory({device_});
    return;
  }
  CountingCpuAllocator::instance().reset_peak();
}

MemoryProfile profile_memory(const std::vector<RunConfig>& configs, torch::Device device,
                             const std::set<int64_t>& case_sizes) {
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
  for (auto size : kMemoryProfileSizes) {  // linear in the samples: two sizes tell every size
    const auto batch = make_random_batch(first, size, torch::kCPU, torch::kCPU);
    for (auto* bytes : {&memory.inputs, &memory.targets}) bytes->sizes.push_back(size);
    memory.inputs.values.push_back(static_cast<double>(tensor_bytes(batch.inputs)));
    memory.targets.values.push_back(static_cast<double>(tensor_bytes(batch.targets)));
  }
  std::set<int64_t> sizes(kMemoryProfileSizes.begin(), kMemoryProfileSizes.end());
  for (auto size : case_sizes) {
    if (size > 0) sizes.insert(size);
  }
  const std::vector<int64_t> ascending(sizes.begin(), sizes.end());
  for (const auto& config : configs) {
    auto measured = measure_stages(*model, config, device, ascending);
    memory.stages[config.checkpoint] = std::move(measured.stages);
    memory.loss_apart[config.checkpoint] = std::move(measured.loss_apart);
  }
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
