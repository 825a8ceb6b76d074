#include "benchmarks/advise/advise.h"

#include "benchmarks/advise/advise_memory.h"
#include "benchmarks/config/test_hooks.h"
#include "benchmarks/measure/graphed_step.h"
#include "benchmarks/measure/memory.h"
#include "core/device_timer.h"
#include "core/text.h"
#include "models/model_zoo.h"
#include "strategies/distributed/gradient_buckets.h"
#include "strategies/distributed/store_sync.h"
#include "strategies/optimizer.h"
#include "strategies/partition.h"
#include "strategies/prediction.h"
#include "strategies/schedule_simulator.h"
#include "strategies/training.h"

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#ifdef PARBENCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/cuda/nccl.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace parbench {
namespace {

constexpr int kProfileRepeats = 5;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// tensor_parallel's activation collectives are timed as a burst of this many back to back
// (collective_ms): a step issues them every few kernels while its GPUs are busy, so neither their
// launch nor a synchronisation is part of each one's cost.
constexpr int kCollectiveBurst = 10;

double median_ms(const std::vector<torch::Device>& devices, const std::function<void()>& work) {
  return 1e3 * median_synchronised_seconds(devices, kProfileRepeats, work);
}

// A piece of work (a part's forward, or its forward and backward) as a Strategy, so that
// GraphedStep captures and replays it as it does a training step.
class CapturableWork final : public Strategy {
 public:
  CapturableWork(torch::Device device, std::function<torch::Tensor()> work) : work_(std::move(work)) {
    devices_ = {device};
  }
  void setup(const ModelFactory&, const std::vector<torch::Device>&, const RunConfig&) override {}
  torch::Device input_device() const override { return devices_.front(); }
  torch::Device target_device() const override { return devices_.front(); }
  torch::Tensor train_step(const Batch&) override { return work_(); }

 private:
  std::function<torch::Tensor()> work_;
};

// The median time of `work` on `device`: run eagerly, or (`graphed`) captured once in a CUDA
// graph and replayed, so that only the device's time counts.
double work_ms(torch::Device device, bool graphed, const std::function<torch::Tensor()>& work) {
  if (!graphed) return median_ms({device}, [&] { work(); });
  CapturableWork capturable(device, work);
  const Batch nothing{torch::empty({0}, device), torch::empty({0}, device)};
  GraphedStep replayed(capturable, nothing);
  return median_ms({device}, [&] { replayed.run(nothing); });
}

// What timing one piece costs beyond its work: a replayed graph of one tiny kernel, launched and
// waited for. A graphed step replays one graph for all its parts' pieces, so a piece's replay
// less this is what the piece adds to that step.
double graph_launch_ms(torch::Device device) {
  static std::map<std::string, double> measured;
  const auto key = device.str();
  if (measured.count(key) == 0) {
    measured[key] = work_ms(device, /*graphed=*/true, [device] { return torch::zeros({1}, device); });
  }
  return measured[key];
}

// `work`'s time on `device` as a piece of a step: eager, its synchronised wall time; graphed,
// its replay's less the launch's cost.
double piece_ms(torch::Device device, bool graphed, const std::function<torch::Tensor()>& work) {
  if (!graphed) return work_ms(device, false, work);
  return std::max(0.0, work_ms(device, true, work) - graph_launch_ms(device));
}

// The batch, its shards over `devices` devices, and the micro-batch sizes the cases run: each
// case's pieces are profiled at their own sizes, not interpolated.
std::vector<int64_t> profile_sizes(int64_t batch, size_t devices, const std::set<int64_t>& case_sizes) {
  std::set<int64_t> sizes = case_sizes;
  sizes.insert(batch);
  for (auto shard : shard_sizes(batch, devices)) sizes.insert(shard);
  return {sizes.begin(), sizes.end()};
}

// The strategy whose step is the whole model on one device: the profile's reference step.
const StrategyInfo& reference_strategy() {
  for (const auto* strategy : StrategyRegistry::instance().all()) {
    if (strategy->predictor().reference) return *strategy;
  }
  throw std::logic_error("advise needs a strategy whose predictor is the reference (StrategyPredictor::reference)");
}

// A strategy's step on one device (by default the reference strategy's at the case's batch): set
// up and warmed up once, and (`graphed`) captured, to be timed alone or with other work beside it.
class ReferenceStep {
 public:
  ReferenceStep(const CaseSpec& spec, torch::Device device, bool graphed)
      : ReferenceStep(reference_strategy().create(), spec.config, device, graphed) {}

  // `strategy` set up on `device` under `config`, on a batch of config.batch_size. Where
  // `step_bytes`, the most one eager step allocates above what is allocated before it, its
  // gradients set to none first: everything the step makes, its gradients included.
  ReferenceStep(std::unique_ptr<Strategy> strategy, const RunConfig& config, torch::Device device, bool graphed,
                double* step_bytes = nullptr)
      : strategy_(std::move(strategy)) {
    strategy_->setup([&config](torch::Device on) { return make_case_model(config, on); }, {device}, config);
    batch_ = make_random_batch(config, config.batch_size, device, device);
    for (int step = 0; step < kProfileRepeats; ++step) strategy_->train_step(batch_);
    if (step_bytes != nullptr) {
      for (auto& parameter : strategy_->model().module().parameters()) parameter.mutable_grad().reset();
      AllocationCounter counter(device);
      const double before = counter.current();
      counter.reset_peak();
      strategy_->train_step(batch_);
      *step_bytes = counter.peak() - before;
    }
    if (graphed) replayed_ = std::make_unique<GraphedStep>(*strategy_, batch_);
  }

  const Strategy& strategy() const { return *strategy_; }

  void run() {
    if (replayed_) {
      replayed_->run(batch_);
    } else {
      strategy_->train_step(batch_);
    }
  }

 private:
  std::unique_ptr<Strategy> strategy_;
  Batch batch_;
  std::unique_ptr<GraphedStep> replayed_;  // declared last: destroyed before the strategy it replays
};

double reference_step_ms(const CaseSpec& spec, torch::Device device, bool graphed) {
  ReferenceStep reference(spec, device, graphed);
  return median_ms({device}, [&] { reference.run(); });
}

}  // namespace

Rehearsal rehearse(const RehearsalRequest& request, torch::Device device, bool graphed) {
  Rehearsal rehearsal;
  ReferenceStep step(request.create(), request.config, device, graphed, &rehearsal.step_bytes);
  rehearsal.step_ms = median_ms({device}, [&] { step.run(); });
  rehearsal.counters = step.strategy().counters();
  return rehearsal;
}

namespace {

// Per part and size: its forward, its backward (the loss included on the last part), where
// `copies` the copy of its output to the next part's device, and where `halves` the backward's
// B and W halves (CutProfile).
struct PartTimes {
  std::vector<std::vector<double>> forward_ms, backward_ms, copy_ms, input_gradient_ms, weight_gradient_ms;
};

PartTimes time_parts(const StagedModel& model, const std::vector<Partition>& parts, const RunConfig& config,
                     const std::vector<int64_t>& sizes, bool graphed, bool copies, bool halves = false) {
  PartTimes times;
  times.forward_ms.assign(parts.size(), {});
  times.backward_ms.assign(parts.size(), {});
  times.copy_ms.assign(copies ? parts.size() - 1 : 0, {});
  times.input_gradient_ms.assign(halves ? parts.size() : 0, {});
  times.weight_gradient_ms.assign(halves ? parts.size() : 0, {});
  for (auto size : sizes) {
    const auto batch = make_random_batch(config, size, parts.front().device, parts.back().device);
    torch::Tensor activation = batch.inputs;
    for (size_t p = 0; p < parts.size(); ++p) {
      const auto& part = parts[p];
      const bool last = p + 1 == parts.size();
      const auto input = p == 0 ? activation : activation.detach().requires_grad_();
      const auto forward = [&] {
        AutocastScope autocast(part.device.type(), model.autocast_dtype());
        return part.forward(input);
      };
      const auto next_input = forward().detach();
      const auto output_gradient = torch::randn_like(next_input);
      const auto forward_and_backward = [&] {
        const auto output = forward();
        if (last) {
          compute_loss(output, batch.targets, config.loss).backward();
        } else {
          output.backward(output_gradient);
        }
        return output.detach();
      };
      for (int warm = 0; warm < 2; ++warm) forward_and_backward();
      const double forward_ms = piece_ms(part.device, graphed, [&] { return forward().detach(); });
      const double both_ms = piece_ms(part.device, graphed, forward_and_backward);
      times.forward_ms[p].push_back(forward_ms);
      times.backward_ms[p].push_back(std::max(0.0, both_ms - forward_ms));
      if (halves) {
        // As stage_executor.cpp's backward_input and backward_weight: B roots the backward at the
        // loss (last part) or the output, and takes the input's gradient alone, keeping the
        // graph; W takes the weights' gradients through it. The first part's B computes nothing.
        const std::vector<torch::Tensor> root_gradient = {last ? torch::Tensor() : output_gradient};
        const auto forward_and_input_gradient = [&] {
          const auto output = forward();
          const auto root = last ? compute_loss(output, batch.targets, config.loss) : output;
          if (p > 0) torch::autograd::grad({root}, {input}, root_gradient, /*retain_graph=*/true);
          return root;
        };
        const auto parameters = part.parameters();
        const auto forward_and_both_halves = [&] {
          const auto root = forward_and_input_gradient();
          torch::autograd::backward({root}, root_gradient, /*retain_graph=*/false, /*create_graph=*/false, parameters);
          return root.detach();
        };
        const double through_input_ms =
            p == 0 ? forward_ms : piece_ms(part.device, graphed, [&] { return forward_and_input_gradient().detach(); });
        const double through_weights_ms = piece_ms(part.device, graphed, forward_and_both_halves);
        times.input_gradient_ms[p].push_back(std::max(0.0, through_input_ms - forward_ms));
        times.weight_gradient_ms[p].push_back(std::max(0.0, through_weights_ms - through_input_ms));
      }
      activation = next_input;
      if (!last) {
        const auto next = parts[p + 1].device;
        if (copies) times.copy_ms[p].push_back(median_ms({part.device, next}, [&] { activation.to(next); }));
        activation = activation.to(next);  // the next part's input, on its device
      }
    }
  }
  return times;
}

// `cut` of `model` over `part_devices` (a part each, in order), each part's pieces timed at
// `sizes` as the staged strategies run them, and each part's update by the case's optimizer.
CutProfile profile_cut(StagedModel& model, const Cut& cut, const std::vector<torch::Device>& part_devices,
                       const RunConfig& config, const std::vector<int64_t>& sizes, bool graphed, bool halves) {
  // The model serves every cut of the set-up in turn: a gradient left on the device of an earlier
  // cut would meet its parameter on another (a module's to() leaves the gradients where they are).
  for (auto& parameter : model.module().parameters()) parameter.mutable_grad().reset();
  auto placed = config;
  set_cut(placed, format_cut(cut));
  const auto parts = partition_model(model, part_devices, placed, config.batch_size, nullptr);
  CutProfile profile;
  profile.cut = format_cut(cut, model.stage_groups());
  profile.sizes = sizes;
  auto times = time_parts(model, parts, config, sizes, graphed, /*copies=*/true, halves);
  profile.forward_ms = std::move(times.forward_ms);
  profile.backward_ms = std::move(times.backward_ms);
  profile.copy_ms = std::move(times.copy_ms);
  profile.input_gradient_ms = std::move(times.input_gradient_ms);
  profile.weight_gradient_ms = std::move(times.weight_gradient_ms);
  for (const auto& part : parts) {
    // The case's optimizer (AdamW's step costs far more than SGD's), over the gradients the
    // timing left.
    Optimizer optimizer(part.parameters(), config.optimizer, config.learning_rate);
    profile.update_ms.push_back(piece_ms(part.device, graphed, [&] {
      optimizer.step();
      return torch::zeros({1}, part.device);  // a graph needs a kernel, whatever the optimizer skips
    }));
  }
  return profile;
}

// A cut's `parts` over `devices` (several per device for a chunked schedule): part c on device c mod D, as
// StagedStrategy::set_up_stages places them.
std::vector<torch::Device> round_robin(const std::vector<torch::Device>& devices, size_t parts) {
  std::vector<torch::Device> part_devices;
  for (size_t part = 0; part < parts; ++part) {
    part_devices.push_back(devices[part % devices.size()]);
  }
  return part_devices;
}

// The time of one collective of `message` across `devices`, one buffer (or shard) on each, by
// NCCL in this process: a synchronised run of `burst` of them back to back, over `burst`. One
// alone (burst 1) carries its launch and the synchronisation; a step that issues many while its
// GPUs are busy (tensor_parallel's) does not pay those for each.
double collective_ms(const std::vector<torch::Device>& devices, const CollectiveMessage& message, int burst = 1) {
#ifdef PARBENCH_WITH_CUDA
  // A gather's or a scatter's whole is a whole number of equal shards.
  const int64_t values = message.bytes / static_cast<int64_t>(c10::elementSize(message.dtype));
  const int64_t shard = values / static_cast<int64_t>(devices.size());
  const bool sharded = message.kind != CollectiveKind::kAllReduce;
  std::vector<torch::Tensor> wholes, shards;
  for (const auto& device : devices) {
    const auto options = torch::TensorOptions().dtype(message.dtype).device(device);
    wholes.push_back(torch::ones({sharded ? shard * static_cast<int64_t>(devices.size()) : values}, options));
    if (sharded) shards.push_back(torch::ones({shard}, options));
  }
  const auto collective = [&] {
    switch (message.kind) {
      case CollectiveKind::kAllReduce: torch::cuda::nccl::all_reduce(wholes, wholes); break;
      case CollectiveKind::kAllGather: torch::cuda::nccl::all_gather(shards, wholes); break;
      case CollectiveKind::kReduceScatter: torch::cuda::nccl::reduce_scatter(wholes, shards); break;
    }
  };
  collective();  // the communicators are made on the first one
  return median_ms(devices, [&] {
           for (int i = 0; i < burst; ++i) collective();
         }) /
         burst;
#else
  (void)devices, (void)message, (void)burst;
  throw std::logic_error("the ranks' collectives are profiled with NCCL, on GPUs");
#endif
}

// The time of one all-reduce (sum) of `bytes` of `dtype` across `devices`, one buffer on each,
// by NCCL in this process (the ranks are processes; on one host NCCL takes the same links).
double allreduce_ms(const std::vector<torch::Device>& devices, int64_t bytes, c10::ScalarType dtype) {
  return collective_ms(devices, {CollectiveKind::kAllReduce, bytes, dtype});
}

// RankProfile::step_lost_per_comm_ms: `reference` (single's step at the per-rank batch on the
// first of the ranks' GPUs `devices`, `step_alone_ms` alone), with one all-reduce of `bytes` (all
// of its gradients) across them beside it, on a stream of its own on each GPU. NCCL's kernels and
// the step's share the first GPU's SMs and memory; what that costs is the pair's time less the
// longer alone, per millisecond of the all-reduce alone. 0 off GPUs or with one.
double step_lost_per_comm_ms(ReferenceStep& reference, double step_alone_ms, const std::vector<torch::Device>& devices,
                             int64_t bytes, c10::ScalarType dtype) {
#ifdef PARBENCH_WITH_CUDA
  if (devices.size() < 2 || !devices.front().is_cuda()) return 0;
  std::vector<torch::Tensor> buffers;
  std::vector<c10::cuda::CUDAStream> sides;
  torch::cuda::nccl::stream_list side_streams;
  for (const auto& gpu : devices) {
    buffers.push_back(torch::ones({bytes / static_cast<int64_t>(c10::elementSize(dtype))},
                                  torch::TensorOptions().dtype(dtype).device(gpu)));
    sides.push_back(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, gpu.index()));
    side_streams.emplace_back(sides.back());
  }
  // Each GPU's side stream starts after, and its current stream goes on after, the all-reduce.
  const auto fork = [&] {
    for (size_t i = 0; i < devices.size(); ++i) {
      at::cuda::CUDAEvent current;
      current.record(c10::cuda::getCurrentCUDAStream(devices[i].index()));
      current.block(sides[i]);
    }
  };
  const auto join = [&] {
    for (size_t i = 0; i < devices.size(); ++i) {
      at::cuda::CUDAEvent done;
      done.record(sides[i]);
      done.block(c10::cuda::getCurrentCUDAStream(devices[i].index()));
    }
  };
  const auto all_reduce = [&] { torch::cuda::nccl::all_reduce(buffers, buffers, /*op=*/0, side_streams); };
  fork();
  all_reduce();  // the communicators are made on the first one
  join();
  const double comm_alone = median_ms(devices, [&] {
    fork();
    all_reduce();
    join();
  });
  const double together = median_ms(devices, [&] {
    fork();
    all_reduce();
    reference.run();
    join();
  });
  return comm_alone > 0 ? std::max(0.0, together - std::max(step_alone_ms, comm_alone)) / comm_alone : 0;
#else
  (void)reference, (void)step_alone_ms, (void)devices, (void)bytes, (void)dtype;
  return 0;
#endif
}

// The ranks' pieces (AdviseProfile::ranks) for every (bucket MiB, per-rank batch) asked for, on
// the ranks' GPUs `devices`: the reference step at the per-rank batch on the first; the backward of each
// stage of the model there, each stage a part of its own, from which each gradient's ready time
// follows (backward runs the stages last first; within a stage, its parameters' gradients are
// taken to come evenly, last first); and each bucket's all-reduce.
void profile_ranks(const CaseSpec& spec, const std::vector<torch::Device>& devices, bool graphed,
                 const std::vector<std::pair<double, int64_t>>& cases, AdviseProfile& profile) {
  std::map<std::pair<int64_t, c10::ScalarType>, double> allreduce_cache;
  std::set<int64_t> rank_batches;
  for (const auto& ranked : cases) rank_batches.insert(ranked.second);
  // Per per-rank batch, once: the stages' backwards and the reference step; per bucket size, the buckets.
  for (auto rank_batch : rank_batches) {
    auto config = spec.config;
    config.batch_size = rank_batch;
    auto model = make_case_model(config);
    Cut stage_per_part;
    for (const auto& stage : model->stages()) stage_per_part.push_back({stage.name});
    set_cut(config, format_cut(stage_per_part));
    const std::vector<torch::Device> one_gpu(stage_per_part.size(), devices.front());
    const auto stages = partition_model(*model, one_gpu, config, rank_batch, nullptr);
    const auto times = time_parts(*model, stages, config, {rank_batch}, graphed, /*copies=*/false);
    CaseSpec at_rank_batch = spec;
    at_rank_batch.config.batch_size = rank_batch;
    int64_t gradient_bytes = 0;
    for (const auto& parameter : model->module().parameters()) {
      gradient_bytes += parameter.numel() * static_cast<int64_t>(parameter.element_size());
    }
    const auto gradient_dtype = model->module().parameters().front().scalar_type();
    double rank_step_ms = 0, lost_per_comm_ms = 0;
    {  // one reference for both, gone before the buckets' all-reduces are timed
      ReferenceStep reference(at_rank_batch, devices.front(), graphed);
      rank_step_ms = median_ms({devices.front()}, [&] { reference.run(); });
      lost_per_comm_ms = step_lost_per_comm_ms(reference, rank_step_ms, devices, gradient_bytes, gradient_dtype);
    }

    double backward_ms = 0;
    std::map<const c10::TensorImpl*, double> ready_ms;
    for (auto s = stages.size(); s-- > 0;) {
      const auto parameters = stages[s].parameters();
      const double begin = backward_ms;
      backward_ms += times.backward_ms[s].front();
      for (size_t i = 0; i < parameters.size(); ++i) {
        const double produced = static_cast<double>(parameters.size() - i) / static_cast<double>(parameters.size());
        ready_ms[parameters[i].unsafeGetTensorImpl()] = begin + produced * (backward_ms - begin);
      }
    }
    const auto parameters = model->module().parameters();
    for (const auto& [bucket_mib, batch] : cases) {
      if (batch != rank_batch) continue;
      RankProfile rank;
      rank.rank_step_ms = rank_step_ms;
      rank.backward_ms = backward_ms;
      rank.step_lost_per_comm_ms = lost_per_comm_ms;
      for (const auto& members : plan_buckets(parameters, bucket_mib)) {
        double ready = 0;
        int64_t bytes = 0;
        for (auto index : members) {
          ready = std::max(ready, ready_ms.at(parameters[index].unsafeGetTensorImpl()));
          bytes += parameters[index].numel() * static_cast<int64_t>(parameters[index].element_size());
        }
        const auto dtype = parameters[members.front()].scalar_type();
        if (allreduce_cache.count({bytes, dtype}) == 0) allreduce_cache[{bytes, dtype}] = allreduce_ms(devices, bytes, dtype);
        rank.bucket_ready_ms.push_back(ready);
        rank.bucket_allreduce_ms.push_back(allreduce_cache[{bytes, dtype}]);
      }
      profile.ranks[{bucket_mib, rank_batch}] = std::move(rank);
    }
  }
}

// A set-up: what every case of it shares (its name up to the strategy's own options), with its
// global batch: a distributed case's config holds its per-rank batch.
std::string setup_key(const CaseSpec& spec) {
  const auto& c = spec.config;
  return c.model + "/batch:" + std::to_string(spec.global_batch) + sample_part(c) +
         "/precision:" + to_string(c.precision) + "/data:" + to_string(spec.data) + (spec.cuda_graph ? "/graph:on" : "");
}

// What a case looks like to its predictor.
CaseConditions conditions_of(const CaseSpec& spec) {
  return CaseConditions{spec.config, spec.global_batch, spec.gpus, visible_gpu_count(), spec.cuda_graph};
}

const StrategyPredictor& predictor_of(const CaseSpec& spec) { return spec.strategy->predictor(); }

bool is_reference(const CaseSpec& spec) { return predictor_of(spec).reference; }

// Whether the case's strategy declares a predictor that covers it, on devices it can profile.
bool modelled(const CaseSpec& spec) {
  if (!spec.strategy->predicts(conditions_of(spec))) return false;
  // Profiled across a GPU per device (the ranks' all-reduces).
  return !predictor_of(spec).needs_gpu_per_device || (visible_gpu_count() >= spec.gpus && spec.gpus >= 2);
}

// A case skipped only because it needs more GPUs than are visible: predicted all the same from
// its parts profiled on the visible GPUs, which they share (so each part's time is its own, but
// two parts on one GPU need no copy: copies count as free). Not where the predictor needs a GPU
// per device.
bool predicted_only(const CaseSpec& spec) {
  const auto visible = visible_gpu_count();
  return visible > 0 && spec.gpus > visible && !predictor_of(spec).needs_gpu_per_device && spec.wants_more_gpus;
}

// The devices a set-up's profile runs on: the case's, or for a predicted-only case the visible
// GPUs, repeated.
std::vector<torch::Device> profile_devices(const CaseSpec& spec) {
  if (!predicted_only(spec)) return case_devices(spec);
  const auto visible = static_cast<int>(torch::cuda::device_count());
  std::vector<torch::Device> devices;
  for (int i = 0; i < spec.gpus; ++i) devices.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(i % visible));
  return devices;
}

// Adds what `spec`'s prediction needs profiled to `request`. Throws where its predictor cannot
// model the case.
void add_to_request(const CaseSpec& spec, ProfileRequest& request) {
  const auto& predictor = predictor_of(spec);
  if (predictor.request) predictor.request(conditions_of(spec), request);
}

// One config per checkpointing choice of a set-up's cases, each as the case runs it: what its
// memory profile measures.
std::vector<RunConfig> memory_configs(const std::vector<CaseSpec>& specs) {
  std::vector<RunConfig> configs;
  for (const auto& spec : specs) {
    if (!predictor_of(spec).memory) continue;
    const auto same = [&](const RunConfig& config) { return config.checkpoint == spec.config.checkpoint; };
    if (std::none_of(configs.begin(), configs.end(), same)) configs.push_back(spec.config);
  }
  return configs;
}

// The fullest device's predicted peak, and whether every device's fits the capacity (0: unknown, fits).
double fullest_bytes(const CaseSpec& spec) {
  return spec.predicted_peak_bytes.empty()
             ? 0.0
             : *std::max_element(spec.predicted_peak_bytes.begin(), spec.predicted_peak_bytes.end());
}
bool fits(const CaseSpec& spec, double capacity_bytes) { return capacity_bytes <= 0 || fullest_bytes(spec) <= capacity_bytes; }

// The samples a set-up's cases run the model's stages at, for its memory profile to measure:
// each case's batch (a ddp or zero rank's, single's), the set-up's whole batch and its shards
// over `devices` (data_parallel's replicas), and the micro-batches its staged cases run.
std::set<int64_t> memory_sizes(const std::vector<CaseSpec>& specs, size_t devices) {
  std::set<int64_t> sizes;
  ProfileRequest request;
  for (const auto& spec : specs) {
    if (!predictor_of(spec).memory) continue;
    add_to_request(spec, request);  // each asked once already, without a throw
    sizes.insert(spec.config.batch_size);
    for (auto size : profile_sizes(spec.global_batch, devices, {})) sizes.insert(size);
  }
  sizes.insert(request.sizes.begin(), request.sizes.end());
  for (const auto& rank : request.ranks) sizes.insert(rank.second);
  return sizes;
}

// What profile_memory reads of its configs: set-ups that differ only in batch (a distributed
// set-up's global batch against the reference's) share one memory profile.
std::string memory_profile_key(const std::vector<RunConfig>& configs, torch::Device device) {
  std::string key = device.str();
  for (const auto& config : configs) {
    key += "|" + config.model + "/" + std::to_string(config.num_classes) + "/" + std::to_string(config.image_size) +
           "/" + std::to_string(config.seq_len) + "/" + std::to_string(static_cast<int>(config.precision)) + "/" +
           std::to_string(static_cast<int>(config.loss)) + "/" + std::to_string(static_cast<int>(config.checkpoint));
  }
  return key;
}

// The reference step's predicted peak (the whole model at `config`'s batch on one device, as the
// time profile runs it first), where the memory profile predicts it.
std::optional<double> reference_peak_bytes(const AdviseProfile& profile, const RunConfig& config) {
  const auto& predictor = reference_strategy().predictor();
  if (!predictor.memory || profile.memory.stages.count(config.checkpoint) == 0) return std::nullopt;
  const auto devices = predictor.memory(profile, CaseConditions{config, config.batch_size, 1, visible_gpu_count(), false}).devices;
  if (devices.empty()) return std::nullopt;
  double fullest = 0;
  for (const auto& memory : devices) fullest = std::max(fullest, memory.peak());
  return fullest;
}

}  // namespace

AdviseProfile profile_setup(const CaseSpec& spec, const std::vector<torch::Device>& devices, bool graphed,
                            const ProfileRequest& request) {
  AdviseProfile profile;
  profile.graphed = graphed;
  // As a case's set-up does: a test can make the set-up's batch run out of memory here, as a model
  // too large for one device does in the reference step.
  test_hooks::at_case_batch(spec.config.batch_size);
  profile.single_step_ms = reference_step_ms(spec, devices.front(), graphed);
  if (devices.size() < 2) return profile;
  profile.sizes = profile_sizes(spec.config.batch_size, devices.size(), request.sizes);
  if (request.parts || !request.cuts.empty()) {
    const auto& config = spec.config;
    auto model = make_case_model(config);
    // Each cut as the cases choose it (choose_cut: a balanced one timed as theirs, on the first
    // device), profiled once at the sizes of every case that runs it. A cut the model cannot make
    // (more parts than stages, a --cut of other parts) is left out: its cases fail on their own at
    // set-up, and the set-up's others are still predicted.
    const auto chosen = [&](size_t parts, int64_t measure_batch) -> std::optional<Cut> {
      try {
        return choose_cut(*model, parts, config, measure_batch, devices.front());
      } catch (const std::invalid_argument&) {
        return std::nullopt;
      }
    };
    const auto profiled = [&](const Cut& cut, const std::vector<int64_t>& sizes) {
      return profile_cut(*model, cut, round_robin(devices, cut.size()), config, sizes, graphed, request.backward_halves);
    };
    if (request.parts) {
      if (const auto cut = chosen(devices.size(), config.batch_size)) profile.parts = profiled(*cut, profile.sizes);
    }
    std::map<Cut, std::pair<std::set<int64_t>, std::vector<CutKey>>> by_cut;  // one profile per distinct cut
    for (const auto& [key, sizes] : request.cuts) {
      if (const auto cut = chosen(key.parts, key.measure_batch)) {
        auto& entry = by_cut[*cut];
        entry.first.insert(sizes.begin(), sizes.end());
        entry.second.push_back(key);
      }
    }
    for (const auto& [cut, entry] : by_cut) {
      const auto parts = profiled(cut, {entry.first.begin(), entry.first.end()});
      for (const auto& key : entry.second) profile.cuts[key] = parts;
    }
  }
  if (!request.ranks.empty()) profile_ranks(spec, devices, graphed, request.ranks, profile);
  if (request.set_up == nullptr) return profile;
  // What the strategy measures at set-up, on the profile's devices at the set-up's whole batch.
  auto strategy = request.set_up->create();
  auto config = request.set_up_config;
  config.batch_size = spec.config.batch_size;
  strategy->setup([&config](torch::Device on) { return make_case_model(config, on); }, devices, config);
  profile.set_up_counters = strategy->counters();
  return profile;
}

std::optional<SimulatedStep> simulate_case(const CaseSpec& spec) {
  const auto& predictor = predictor_of(spec);
  if (!predictor.simulate || !modelled(spec)) return std::nullopt;
  const auto devices = case_devices(spec);
  ProfileRequest request;
  try {
    add_to_request(spec, request);
  } catch (const std::exception&) {
    return std::nullopt;  // a schedule that cannot be built at the case's shape
  }
  const auto profile = profile_setup(spec, devices, spec.cuda_graph && devices.front().is_cuda(), request);
  try {
    return predictor.simulate(profile, conditions_of(spec));
  } catch (const std::exception&) {
    return std::nullopt;  // a cut the model cannot make
  }
}

std::vector<CaseSpec> advise(const std::vector<CaseSpec>& cases, const Options& options, std::vector<CaseSpec>* left_out_cases) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<CaseSpec>> setups;
  size_t left_out = 0;
  // Why each case that does not run was left out (one that was skipped already keeps its reason).
  std::map<std::string, std::string> left_out_reasons;
  const std::string kNotPredicted = "left out by --advise: no predictor covers it on these devices";
  const std::string kNotAmongTheBest = "left out by --advise=" + std::to_string(options.advise_validate) + ": not among the " +
                                       std::to_string(options.advise_validate) + " best predicted of its set-up";
  std::vector<const CaseSpec*> advised;
  std::vector<CaseSpec> to_run;
  // A scaling run (--gpus=LIST) has a set-up's multi-device cases at several counts: each count
  // is profiled on its own devices and ranked apart, with the whole-model reference in each.
  std::map<std::string, std::set<int>> counts;
  for (const auto& spec : cases) {
    // Whether its predictor covers it, and what it needs profiled, asked before anything is: a
    // case its predictor cannot model (a schedule that cannot be built at its shape, or that its
    // rules cannot read) is reported and runs unpredicted.
    ProfileRequest probe;
    try {
      if (!modelled(spec) || (!spec.skip_reason.empty() && !predicted_only(spec))) {
        ++left_out;
        left_out_reasons[spec.name] = kNotPredicted;
        continue;
      }
      add_to_request(spec, probe);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "parbench advise: %s: cannot be predicted (%s); it runs without a prediction\n",
                   spec.name.c_str(), first_line(error).c_str());
      if (spec.skip_reason.empty()) to_run.push_back(spec);
      continue;
    }
    advised.push_back(&spec);
    if (!is_reference(spec)) counts[setup_key(spec)].insert(spec.gpus);
  }
  for (const auto* spec : advised) {
    const auto key = setup_key(*spec);
    const auto& setup_counts = counts[key];
    std::vector<std::string> keys = {key};
    if (setup_counts.size() > 1) {
      keys.clear();
      for (int count : setup_counts) {
        if (is_reference(*spec) || count == spec->gpus) keys.push_back(key + "/gpus:" + std::to_string(count));
      }
    }
    for (const auto& group : keys) {
      if (setups.count(group) == 0) order.push_back(group);
      setups[group].push_back(*spec);
    }
  }
  std::set<std::string> recorded;  // the whole-model reference is predicted, recorded and run once
  if (left_out > 0) {
    std::vector<std::string> predicted;
    for (const auto* strategy : StrategyRegistry::instance().all()) {
      if (strategy->predictor().predict) predicted.push_back(strategy->name());
    }
    std::fprintf(stderr,
                 "parbench advise: %zu case(s) left out: advise predicts the cases of %s that their predictors "
                 "cover (docs/METRICS.md, \"Predicted step time\"), on the devices this machine has\n",
                 left_out, joined(predicted, ", ").c_str());
  }

  nlohmann::json predictions = nlohmann::json::array();
  double profile_seconds = 0;
  const auto devices_of = [&](const std::vector<CaseSpec>& specs) {
    const auto multi = std::find_if(specs.begin(), specs.end(), [](const auto& s) { return !is_reference(s); });
    return profile_devices(multi != specs.end() ? *multi : specs.front());
  };
  // Each memory profile is measured once, at the sizes of every set-up that shares it.
  std::map<std::string, std::set<int64_t>> memory_sizes_of;  // by memory_profile_key
  for (const auto& key : order) {
    const auto devices = devices_of(setups[key]);
    const auto configs = memory_configs(setups[key]);
    if (configs.empty()) continue;
    const auto sizes = memory_sizes(setups[key], devices.size());
    memory_sizes_of[memory_profile_key(configs, devices.front())].insert(sizes.begin(), sizes.end());
  }
  std::map<std::string, MemoryProfile> memory_profiles;  // by memory_profile_key
  for (const auto& key : order) {
    auto& specs = setups[key];
    const auto began = std::chrono::steady_clock::now();
    const auto multi = std::find_if(specs.begin(), specs.end(), [](const auto& s) { return !is_reference(s); });
    const auto devices = devices_of(specs);
    const auto device = devices.front();
    // The set-up's whole batch, whatever a distributed case's own config holds.
    CaseSpec setup = multi != specs.end() ? *multi : specs.front();
    setup.config.batch_size = setup.global_batch;
    // Graph cases are predicted from graphed work, where there are GPUs to capture it on.
    const bool graphed = specs.front().cuda_graph && device.is_cuda();
    // One time profile per checkpointing choice of the set-up's cases, its pieces run as that
    // choice runs them (a checkpointed backward runs its blocks' forwards again).
    std::set<Checkpointing> choices;
    for (const auto& spec : specs) choices.insert(spec.config.checkpoint);
    // The memory profile first, apart (a case's memory is predicted where its time cannot be), and
    // once per model and shape: a model too large for one GPU takes minutes to build.
    AdviseProfile profile;  // what the memory predictions read
    profile.graphed = graphed;
    if (const auto configs = memory_configs(specs); !configs.empty()) {
      const auto memory_key = memory_profile_key(configs, device);
      if (const auto cached = memory_profiles.find(memory_key); cached != memory_profiles.end()) {
        profile.memory = cached->second;
      } else {
        try {
          profile.memory = profile_memory(configs, device, memory_sizes_of[memory_key]);
          memory_profiles[memory_key] = profile.memory;
        } catch (const std::exception& error) {
          release_cached_memory();
          std::fprintf(stderr, "parbench advise: %s: the memory profile failed (%s); its cases' memory is not predicted\n",
                       key.c_str(), first_line(error).c_str());
        }
      }
    }
    std::map<Checkpointing, AdviseProfile> time_profiles;
    std::map<std::string, Rehearsal> rehearsals;  // every choice's ranks rehearsed, for time and memory
    std::map<CollectiveMessage, double> collectives;  // every choice's, timed
    for (const auto choice : choices) {
      CaseSpec chosen = setup;
      chosen.config.checkpoint = choice;
      ProfileRequest request;
      for (const auto& spec : specs) {
        if (spec.config.checkpoint == choice) add_to_request(spec, request);  // each asked once already, without a throw
      }
      const std::string choice_text = choice == Checkpointing::kOff ? "" : "/checkpoint:" + to_string(choice);
      const auto reference_peak = reference_peak_bytes(profile, chosen.config);
      const double capacity = profile.memory.device_bytes;
      if (reference_peak && capacity > 0 && *reference_peak > capacity) {
        // The time profile starts with that step: it would only run out of memory, after building
        // the whole model on the device.
        std::fprintf(stderr,
                     "parbench advise: %s%s: the time profile was skipped: its reference step (the whole model at "
                     "batch %lld on one device) is predicted to need %.0f GiB of %.0f; its cases' times are not "
                     "predicted\n",
                     key.c_str(), choice_text.c_str(),
                     static_cast<long long>(chosen.config.batch_size), *reference_peak / kGiB, capacity / kGiB);
      } else try {
        time_profiles[choice] = profile_setup(chosen, devices, graphed, request);
      } catch (const std::exception& error) {
        // What a failed piece left cached goes back to the driver (release_cached_memory): on 2
        // H200s, after gpt-6.7b's reference step ran out of memory, the memory profile's cuBLAS
        // handle could not be made. A model too large for the reference step's device still has
        // its memory predicted.
        release_cached_memory();
        std::fprintf(stderr, "parbench advise: %s%s: the time profile failed (%s); its cases' times are not predicted\n",
                     key.c_str(), choice_text.c_str(),
                     first_line(error).c_str());
      }
      // Apart from the time profile, each on its own: a rank whose slice fits its device is
      // rehearsed, and the links timed, even where the whole model did not fit the reference step's.
      for (const auto& [name, asked] : request.rehearsals) {
        if (asked.time_only && time_profiles.count(choice) == 0) continue;
        try {
          rehearsals[name] = rehearse(asked, device, graphed);
        } catch (const std::exception& error) {
          release_cached_memory();
          std::fprintf(stderr, "parbench advise: %s: the rank's rehearsal failed (%s); it is predicted without it\n",
                       name.c_str(), first_line(error).c_str());
        }
      }
      for (const auto& message : request.collectives) {
        if (collectives.count(message) != 0) continue;  // timed for another checkpointing choice
        try {
          collectives[message] = collective_ms(devices, message, kCollectiveBurst);
        } catch (const std::exception& error) {
          release_cached_memory();
          std::fprintf(stderr, "parbench advise: %s: the %s of %lld bytes failed (%s)\n", key.c_str(),
                       to_string(message.kind).c_str(), static_cast<long long>(message.bytes), first_line(error).c_str());
        }
      }
    }
    const bool timed = !time_profiles.empty();
    profile.rehearsals = rehearsals;
    profile.collective_ms = collectives;
    for (auto& entry : time_profiles) {
      entry.second.memory = profile.memory;
      entry.second.rehearsals = rehearsals;
      entry.second.collective_ms = collectives;
    }
    if (!timed && profile.memory.stages.empty()) {
      // The set-up's cases still run, unpredicted, and fail or not on their own.
      std::fprintf(stderr, "parbench advise: %s: nothing was profiled; its cases run without predictions\n", key.c_str());
      to_run.insert(to_run.end(), specs.begin(), specs.end());
      continue;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    profile_seconds += seconds;

    // A case its predictor cannot predict from this profile (a cut the model cannot make) runs
    // unpredicted, and fails or not on its own.
    std::map<std::string, std::string> labels;  // by case name: the cut it was predicted from
    // Time and memory apart: a case whose step cannot be predicted (a rank not rehearsed) may
    // still have its memory predicted, and the other way round; with neither it runs unpredicted.
    for (auto& spec : specs) {
      const auto timing = time_profiles.find(spec.config.checkpoint);
      try {
        if (timing != time_profiles.end()) {
          const auto prediction = predictor_of(spec).predict(timing->second, conditions_of(spec));
          spec.predicted_step_ms = prediction.step_ms;
          labels[spec.name] = prediction.profile;
        }
      } catch (const std::exception& error) {
        std::fprintf(stderr, "parbench advise: %s: its step cannot be predicted (%s)\n", spec.name.c_str(),
                     first_line(error).c_str());
        spec.predicted_step_ms.reset();
      }
      try {
        if (predictor_of(spec).memory && !profile.memory.stages.empty()) {
          // The time profile where there is one: the cut the case's time was predicted from.
          const auto& read = timing != time_profiles.end() ? timing->second : profile;
          for (const auto& memory : predictor_of(spec).memory(read, conditions_of(spec)).devices) {
            spec.predicted_peak_bytes.push_back(memory.peak());
          }
        }
      } catch (const std::exception& error) {
        std::fprintf(stderr, "parbench advise: %s: its memory cannot be predicted (%s)\n", spec.name.c_str(),
                     first_line(error).c_str());
        spec.predicted_peak_bytes.clear();
      }
    }
    const auto unpredicted = std::stable_partition(specs.begin(), specs.end(), [](const CaseSpec& spec) {
      return spec.predicted_step_ms.has_value() || !spec.predicted_peak_bytes.empty();
    });
    for (auto spec = unpredicted; spec != specs.end(); ++spec) {
      if (spec->skip_reason.empty()) to_run.push_back(*spec);
    }
    specs.erase(unpredicted, specs.end());
    // Those predicted to fit first, then those with a predicted time, fastest first.
    const double capacity = profile.memory.device_bytes;
    const auto order_key = [capacity](const CaseSpec& spec) {
      return std::make_tuple(!fits(spec, capacity), !spec.predicted_step_ms.has_value(), spec.predicted_step_ms.value_or(0.0));
    };
    std::stable_sort(specs.begin(), specs.end(), [&](const auto& a, const auto& b) { return order_key(a) < order_key(b); });
    // Every cut profiled, each once: the fewest parts first.
    std::vector<std::string> cut_texts;
    const auto add_cut = [&](const CutProfile& parts) {
      if (!parts.cut.empty() && std::find(cut_texts.begin(), cut_texts.end(), parts.cut) == cut_texts.end()) {
        cut_texts.push_back(parts.cut);
      }
    };
    for (const auto& [choice, timing] : time_profiles) {
      add_cut(timing.parts);
      for (const auto& entry : timing.cuts) add_cut(entry.second);
    }
    const std::string cuts = cut_texts.empty() ? "-" : joined(cut_texts, "; ");
    std::printf("parbench advise: %s (cut %s; profiled%s in %.1f s)\n", key.c_str(), cuts.c_str(),
                profile.graphed ? " under CUDA graphs" : "", seconds);
    if (!device.is_cuda() && multi != specs.end()) {
      std::printf("  CPU stand-ins: the predictions assume the devices run side by side; here they share one CPU\n");
    }
    // The rate in the model's unit: tokens for a language model, images otherwise.
    const bool tokens = is_language_model(setup.config.model);
    const double items_per_sample = tokens ? static_cast<double>(setup.config.seq_len) : 1.0;
    std::printf("  %4s  %12s  %10s  %8s  %s\n", "rank", "predicted ms", tokens ? "tokens/s" : "images/s", "peak GiB",
                "case");
    for (size_t rank = 0; rank < specs.size(); ++rank) {
      auto& spec = specs[rank];
      spec.predicted_rank = static_cast<int>(rank + 1);
      const bool runs = spec.skip_reason.empty();
      const bool timed_case = spec.predicted_step_ms.has_value();
      const bool fitting = fits(spec, capacity);
      char time_text[32] = "-", rate_text[32] = "-", peak_text[32] = "-";
      if (timed_case) {
        std::snprintf(time_text, sizeof time_text, "%.2f", *spec.predicted_step_ms);
        std::snprintf(rate_text, sizeof rate_text, "%.0f",
                      1e3 * static_cast<double>(spec.global_batch) * items_per_sample / *spec.predicted_step_ms);
      }
      if (!spec.predicted_peak_bytes.empty()) std::snprintf(peak_text, sizeof peak_text, "%.2f", fullest_bytes(spec) / kGiB);
      std::string notes;
      if (rank == 0 && timed_case && fitting) notes += "  <- recommended";
      if (!fitting) {
        char flag[96];
        std::snprintf(flag, sizeof flag, "  (does not fit: predicted %.3g GiB of %.3g)", fullest_bytes(spec) / kGiB, capacity / kGiB);
        notes += flag;
      }
      if (!runs) notes += "  (not run: " + spec.skip_reason + ")";
      std::printf("  %4zu  %12s  %10s  %8s  %s%s\n", rank + 1, time_text, rate_text, peak_text, spec.name.c_str(), notes.c_str());
      const auto label = labels.count(spec.name) != 0 ? labels.at(spec.name) : std::string();
      if (!recorded.insert(spec.name).second) continue;  // the reference, in a later count's ranking
      nlohmann::json prediction = {{"name", spec.name},
                                   {"predicted_step_ms", timed_case ? nlohmann::json(*spec.predicted_step_ms) : nlohmann::json()},
                                   {"rank", rank + 1}, {"profile", !label.empty() ? label : timed_case ? "single" : "none"}};
      if (!spec.predicted_peak_bytes.empty()) {
        auto peaks = nlohmann::json::array();
        for (double bytes : spec.predicted_peak_bytes) peaks.push_back(bytes / kGiB);
        prediction["predicted_peak_gib"] = peaks;
        prediction["fits"] = fitting;
      }
      if (!runs) prediction["not_run"] = spec.skip_reason;
      predictions.push_back(prediction);
      // The reference step always runs; so does a case without a predicted time (as an unpredicted
      // one does) and one predicted not to fit, whose out-of-memory error is shown and ends only it.
      const bool validated = static_cast<int>(rank) < options.advise_validate || is_reference(spec) || !timed_case || !fitting;
      if (validated && runs) to_run.push_back(spec);
      if (!validated) left_out_reasons.emplace(spec.name, kNotAmongTheBest);
    }
    std::fflush(stdout);
  }
  std::set<std::string> seen;  // the reference, in every count's ranking of a scaling run, runs once
  to_run.erase(std::remove_if(to_run.begin(), to_run.end(), [&](const CaseSpec& spec) { return !seen.insert(spec.name).second; }),
               to_run.end());
  // Every case left out, as skipped with why: the JSON and the closing count hold every case the
  // options asked for.
  for (const auto& spec : cases) {
    if (left_out_cases == nullptr || !seen.insert(spec.name).second) continue;
    CaseSpec skipped = spec;
    if (skipped.skip_reason.empty()) {
      const auto why = left_out_reasons.find(spec.name);
      skipped.skip_reason = why != left_out_reasons.end() ? why->second : "left out by --advise";
    }
    left_out_cases->push_back(std::move(skipped));
  }
  benchmark::AddCustomContext("advise_predictions", predictions.dump());
  char seconds_text[32];
  std::snprintf(seconds_text, sizeof seconds_text, "%.2f", profile_seconds);
  benchmark::AddCustomContext("advise_profile_s", seconds_text);
  // What the profiles left cached goes back to the driver before the cases run: the ranks are
  // other processes on the same GPUs. On 2 H200s, gpt-6.7b's memory profile left 7.46 GiB held by
  // this process on GPU 0, and ZeRO-3's rank 0 there then ran out of memory.
  release_cached_memory();
  return to_run;
}

}  // namespace parbench
