// DataParallel in one process, as PyTorch's torch.nn.DataParallel runs it. Every step:
//   1. broadcast device 0's parameters and buffers into the replicas, one flat copy per dtype;
//   2. scatter the batch: an equal chunk per device (the last may be smaller);
//   3. run each replica's forward from its own host thread (replica 0's from the caller), on
//      each device's current stream: C++ has no GIL, so the replicas dispatch in parallel;
//   4. gather the outputs on device 0 and take the loss there;
//   5. backward: the loss's, then each replica's from its output's gradient, in parallel as the
//      forwards (Python's is one backward through the gather; no edge between devices here, so
//      that a CUDA graph can capture the step);
//   6. reduce the replicas' gradients onto device 0, one flat copy per dtype;
//   7. SGD on device 0.
// The replicas are built once, at set-up: replica 0 is the model itself, the others live on
// devices 1..N-1 and are overwritten by each broadcast. The gradients are Python's (the
// backward of a broadcast is a reduce-add) and so is batch-norm: the model keeps replica 0's
// running statistics, the other replicas' are overwritten by the next broadcast.
//
// --dp-replicate=clone runs LibTorch's torch::nn::parallel::data_parallel instead, which clones
// the model for every replica every step, and whose replicas' batch-norm statistics are dropped.
#include "core/counter_table.h"
#include "core/device_timer.h"
#include "core/flat_tensors.h"
#include "strategies/optimizer.h"
#include "strategies/prediction.h"
#include "strategies/strategy.h"
#include "strategies/training.h"
#include "strategies/worker_thread.h"

#include <ATen/record_function.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <stdexcept>

namespace parbench {
namespace {

// data_parallel's option, under its declared field; the default is the declaration's
// (Strategies.OptionStructsDefaultToTheirDeclarations checks).
struct DataParallelOptions {
  // "replicate": "broadcast" (replicas built once, parameters broadcast every step, as PyTorch's
  // DataParallel) or "clone" (LibTorch's data_parallel: replicas cloned every step).
  std::string replicate = "broadcast";
};

DataParallelOptions data_parallel_options(const RunConfig& config) {
  return DataParallelOptions{option_choice(config, "replicate", DataParallelOptions{}.replicate)};
}

// What counters() reports (docs/METRICS.md, "data_parallel").
PARBENCH_DECLARE_COUNTER(Counter("broadcast_ms").unit("ms").lower_is_better()
                             .means("data_parallel broadcast: the parameters' broadcast to the replicas"));
PARBENCH_DECLARE_COUNTER(Counter("reduce_ms").unit("ms").lower_is_better()
                             .means("data_parallel broadcast: the gradients' reduction onto the first device"));
PARBENCH_DECLARE_COUNTER(Counter("replicate_ms").unit("ms").lower_is_better()
                             .means("data_parallel clone: cloning the model onto every device once, as each step does"));
PARBENCH_DECLARE_COUNTER(Counter("host_forward_ms").unit("ms").lower_is_better()
                             .means("data_parallel: host time per step issuing the replicas' forwards"));
PARBENCH_DECLARE_COUNTER(Counter("host_backward_ms").unit("ms").lower_is_better()
                             .means("data_parallel: host time per step issuing the replicas' backwards"));

using Clock = std::chrono::steady_clock;

// `sources` moved to `device` in one coalesced copy per dtype, as tensors shaped like `sources`,
// in their order.
std::vector<torch::Tensor> coalesced_to(const std::vector<torch::Tensor>& sources, torch::Device device) {
  std::vector<torch::Tensor> moved(sources.size());
  for (const auto& group : indices_by_dtype(sources)) {
    const auto parts = split_like(concatenated(sources, group).to(device, /*non_blocking=*/true), sources, group);
    for (size_t k = 0; k < group.size(); ++k) moved[group[k]] = parts[k];
  }
  return moved;
}

// Moves `tensors` (a replica's parameters and buffers) into one flat tensor per dtype, in order of
// first appearance, each tensor becoming a view of its slot with its own sizes and strides
// (channels-last weights stay so). Returns the flat tensors: a broadcast is then one copy per dtype.
std::vector<torch::Tensor> flatten_in_place(const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flats;
  for (const auto& group : indices_by_dtype(tensors)) {
    int64_t elements = 0;
    for (auto i : group) {
      TORCH_CHECK(tensors[i].is_non_overlapping_and_dense(), "data_parallel flattens dense tensors only");
      elements += tensors[i].numel();
    }
    auto flat = torch::empty({elements}, tensors[group.front()].options());
    int64_t offset = 0;
    for (auto i : group) {
      auto view = flat.as_strided(tensors[i].sizes(), tensors[i].strides(), offset);
      view.copy_(tensors[i]);
      const_cast<torch::Tensor&>(tensors[i]).set_data(view);
      offset += tensors[i].numel();
    }
    flats.push_back(flat);
  }
  return flats;
}

std::vector<torch::Tensor> gradients_of(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> gradients;
  for (const auto& parameter : parameters) gradients.push_back(parameter.grad());
  return gradients;
}

class DataParallel final : public Strategy {
 public:
  void setup(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
             const RunConfig& config) override {
    TORCH_CHECK(devices.size() >= 2, "data_parallel needs at least 2 devices, got ", devices.size());
    const auto replicate = data_parallel_options(config).replicate;
    if (replicate != "broadcast" && replicate != "clone") {
      throw std::invalid_argument("unknown data_parallel replication '" + replicate + "' (allowed: broadcast, clone)");
    }
    clone_ = replicate == "clone";
    if (clone_ && !devices.front().is_cuda()) {
      throw std::invalid_argument("data_parallel replicate:clone needs GPUs: LibTorch's data_parallel gathers CUDA "
                                  "tensors only");
    }
    devices_ = devices;
    config_ = config;
    model_ = make_model_on(make_model, devices.front(), config.precision);
    if (clone_) {
      optimizer_ = make_optimizer(*model_, config, Optimizer::SgdKernels::kPerParameter);
      replicate_ms_ = 1e3 * median_synchronised_seconds(devices_, kMeasureRepeats, [this] {
                        for (const auto& device : devices_) model_->module().clone(device);
                      });
      return;
    }
    replicas_.push_back(model_);
    for (size_t d = 1; d < devices.size(); ++d) {
      replicas_.push_back(make_model_on(make_model, devices[d], config.precision));
      workers_.push_back(std::make_unique<WorkerThread>());
    }
    for (size_t r = 0; r < devices.size(); ++r) {
      const bool shared = devices[r].is_cuda() && std::find(devices.begin(), devices.begin() + r, devices[r]) != devices.begin() + r;
      own_streams_.push_back(shared ? std::optional<c10::Stream>(c10::impl::VirtualGuardImpl(devices[r].type())
                                                                     .getStreamFromGlobalPool(devices[r]))
                                    : std::nullopt);
    }
    for (const auto& replica : replicas_) {
      parameters_.push_back(replica->module().parameters());
      buffers_.push_back(replica->module().buffers());
      auto state = parameters_.back();
      state.insert(state.end(), buffers_.back().begin(), buffers_.back().end());
      flat_state_.push_back(flatten_in_place(state));
    }
    broadcast_ms_ = 1e3 * median_synchronised_seconds(devices_, kMeasureRepeats, [this] { broadcast(); });
    // Gradient-sized zeros, made before the timing so that only the reduction is timed.
    std::vector<std::vector<torch::Tensor>> gradients;
    for (const auto& parameters : parameters_) {
      gradients.emplace_back();
      for (const auto& parameter : parameters) gradients.back().push_back(torch::zeros_like(parameter));
    }
    reduce_ms_ = 1e3 * median_synchronised_seconds(devices_, kMeasureRepeats,
                                                   [this, &gradients] { reduce(gradients, replicas_.size()); });
    // Replica 0's parameters are the model's, and the only ones updated.
    optimizer_ = std::make_unique<Optimizer>(parameters_.front(), config.optimizer, config.learning_rate);
  }

  torch::Device input_device() const override { return devices_.front(); }
  torch::Device target_device() const override { return devices_.front(); }

  std::map<std::string, std::string> describe() const override { return {{"replicate", clone_ ? "clone" : "broadcast"}}; }

  // broadcast: every replica's parameters on its device, the optimizer's state beside replica 0's;
  // clone: the model on device 0 (the per-step clones do not outlive the step).
  std::vector<DeviceModelStates> model_states() const override {
    std::vector<DeviceModelStates> states(devices_.size());
    states.front() = {optimizer_->parameters(), optimizer_->state()};
    for (size_t r = 1; r < parameters_.size(); ++r) states[r].parameters = parameters_[r];
    return states;
  }

  std::map<std::string, double> counters() const override {
    if (clone_) return {{"replicate_ms", replicate_ms_}};
    std::map<std::string, double> counters = {{"broadcast_ms", broadcast_ms_}, {"reduce_ms", reduce_ms_}};
    if (steps_ > 0) {
      counters["host_forward_ms"] = 1e3 * host_forward_seconds_ / static_cast<double>(steps_);
      counters["host_backward_ms"] = 1e3 * host_backward_seconds_ / static_cast<double>(steps_);
    }
    return counters;
  }

  torch::Tensor train_step(const Batch& batch) override {
    if (clone_) {
      optimizer_->zero_grad();
      auto loss = compute_loss(model_->data_parallel_forward(batch.inputs, devices_), batch.targets, config_.loss);
      loss.backward();
      optimizer_->step();
      return loss.detach();
    }
    for (auto& parameters : parameters_) {
      for (auto& parameter : parameters) parameter.mutable_grad().reset();
    }
    broadcast();
    const auto began = Clock::now();
    const auto outputs = parallel_forward(batch.inputs);
    const auto forwards_issued = Clock::now();
    // The outputs join the loss on device 0 as leaves: an autograd edge between devices would
    // have the engine sync with a device's default stream, which a CUDA graph capture must not
    // touch. The loss's backward gives each output's gradient, and each replica's backward then
    // runs from it on its own device.
    std::vector<torch::Tensor> gathered;
    torch::Tensor loss;
    {
      RECORD_USER_SCOPE("gather and loss");
      for (const auto& output : outputs) {
        gathered.push_back(output.detach().to(devices_.front(), /*non_blocking=*/true).requires_grad_());
      }
      loss = compute_loss(torch::cat(gathered), batch.targets, config_.loss);
      loss.backward();
    }
    parallel_backward(outputs, gathered);
    host_forward_seconds_ += std::chrono::duration<double>(forwards_issued - began).count();
    host_backward_seconds_ += std::chrono::duration<double>(Clock::now() - forwards_issued).count();
    ++steps_;
    std::vector<std::vector<torch::Tensor>> gradients;
    for (const auto& parameters : parameters_) gradients.push_back(gradients_of(parameters));
    reduce(gradients, outputs.size());
    RECORD_USER_SCOPE("optimizer");
    optimizer_->step();
    return loss.detach();
  }

 private:
  static constexpr int kMeasureRepeats = 5;

  // Replica 0's parameters and buffers into every other replica: one copy per dtype, their flat
  // tensors being alike.
  void broadcast() {
    RECORD_USER_SCOPE("broadcast");
    torch::NoGradGuard no_grad;
    for (size_t r = 1; r < replicas_.size(); ++r) {
      for (size_t k = 0; k < flat_state_[r].size(); ++k) flat_state_[r][k].copy_(flat_state_.front()[k], /*non_blocking=*/true);
    }
  }

  // Adds the first `used` replicas' gradients into replica 0's (the model's): from another
  // device in one coalesced copy per dtype, on the same device straight from the tensors.
  void reduce(const std::vector<std::vector<torch::Tensor>>& gradients, size_t used) {
    RECORD_USER_SCOPE("reduce");
    torch::NoGradGuard no_grad;
    for (size_t r = 1; r < used; ++r) {
      torch::_foreach_add_(gradients.front(), devices_[r] == devices_.front()
                                                  ? gradients[r]
                                                  : coalesced_to(gradients[r], devices_.front()));
    }
  }

  // Scatters `inputs` over the replicas and runs their forwards in parallel. The outputs stay
  // on their devices.
  std::vector<torch::Tensor> parallel_forward(const torch::Tensor& inputs) {
    const auto shards = inputs.chunk(static_cast<int64_t>(replicas_.size()));
    std::vector<torch::Tensor> outputs(shards.size());
    std::vector<torch::Tensor> placed;
    {
      RECORD_USER_SCOPE("scatter");
      for (size_t r = 0; r < shards.size(); ++r) placed.push_back(shards[r].to(devices_[r], /*non_blocking=*/true));
    }
    on_every_replica(shards.size(), [this, &placed, &outputs](size_t r) {
      RECORD_USER_SCOPE("forward replica" + std::to_string(r));
      outputs[r] = replicas_[r]->forward(placed[r]);
    });
    return outputs;
  }

  // Each replica's backward from its output's gradient (on device 0 in `gathered`), in parallel.
  void parallel_backward(const std::vector<torch::Tensor>& outputs, const std::vector<torch::Tensor>& gathered) {
    std::vector<torch::Tensor> gradients;
    for (size_t r = 0; r < outputs.size(); ++r) {
      gradients.push_back(gathered[r].grad().to(devices_[r], /*non_blocking=*/true));
    }
    on_every_replica(outputs.size(), [&outputs, &gradients](size_t r) {
      RECORD_USER_SCOPE("backward replica" + std::to_string(r));
      outputs[r].backward(gradients[r]);
    });
  }

  // Runs `job(r)` for the first `used` replicas in parallel: replica r > 0's on worker r-1, and
  // replica 0's on the caller's thread, each on its replica's stream (compute_stream). Rethrows
  // the first error once every job has ended.
  void on_every_replica(size_t used, const std::function<void(size_t)>& job) {
    std::vector<c10::Stream> streams;
    for (size_t r = 0; r < used; ++r) streams.push_back(compute_stream(r));
    // A replica with a stream of its own starts behind the caller's work on its device.
    for (size_t r = 0; r < used; ++r) {
      if (own_streams_[r]) stream_waits_for(*own_streams_[r], current_stream(devices_[r]));
    }
    for (size_t r = 1; r < used; ++r) {
      workers_[r - 1]->start([r, &job, &streams] {
        c10::StreamGuard on_replica_stream(streams[r]);
        job(r);
      });
    }
    std::exception_ptr first_error;
    try {
      job(0);
    } catch (...) {
      first_error = std::current_exception();
    }
    for (size_t r = 1; r < used; ++r) {
      const auto error = workers_[r - 1]->finish();  // before what the jobs use goes
      if (error && !first_error) first_error = error;
    }
    for (size_t r = 0; r < used; ++r) {
      if (own_streams_[r]) stream_waits_for(current_stream(devices_[r]), *own_streams_[r]);
    }
    if (first_error) std::rethrow_exception(first_error);
  }

  static c10::Stream current_stream(const torch::Device& device) {
    return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
  }

  // Where replica r computes: the caller's current stream on its device, or, for a replica that
  // shares its GPU with an earlier one (--devices=0,0), a stream of its own, as it would have on
  // a GPU of its own: the replicas' host threads then do not queue onto one stream, and their
  // kernels may overlap.
  c10::Stream compute_stream(size_t r) const { return own_streams_[r] ? *own_streams_[r] : current_stream(devices_[r]); }

  RunConfig config_;
  bool clone_ = false;
  // broadcast: the replicas (0 is model_), their parameters and buffers, a worker per replica > 0.
  std::vector<ModelPtr> replicas_;
  std::vector<std::vector<torch::Tensor>> parameters_, buffers_;
  std::vector<std::optional<c10::Stream>> own_streams_;  // per replica: set where it shares a GPU
  std::vector<std::vector<torch::Tensor>> flat_state_;  // per replica: its parameters and buffers, one flat tensor per dtype
  std::vector<std::unique_ptr<WorkerThread>> workers_;
  double broadcast_ms_ = 0, reduce_ms_ = 0;
  double host_forward_seconds_ = 0, host_backward_seconds_ = 0;
  int64_t steps_ = 0;
  std::unique_ptr<Optimizer> optimizer_;  // over replica 0's parameters (clone: the model's)
  // clone
  double replicate_ms_ = 0;
};

// --advise (broadcast variant): the broadcast, the replicas' forwards side by side, then their
// backwards side by side (each replica's is the cut's parts in sequence, at its shard's size), the
// reduction, and the update of the whole model on device 0. The broadcast and the reduction are
// the strategy's own, measured at set-up on the profile's devices (broadcast_ms, reduce_ms).
StrategyPredictor data_parallel_predictor() {
  StrategyPredictor predictor;
  predictor.covers = [](const CaseConditions& conditions) {
    return data_parallel_options(conditions.config).replicate == "broadcast";
  };
  predictor.request = [](const CaseConditions& conditions, ProfileRequest& request) {
    request.parts = true;
    if (request.set_up == nullptr) {
      request.set_up = &StrategyRegistry::instance().get("data_parallel");
      request.set_up_config = conditions.config;
    }
  };
  predictor.predict = [](const AdviseProfile& profile, const CaseConditions& conditions) {
    const auto whole_model = [&](const std::vector<std::vector<double>>& per_part, int64_t size) {
      double sum = 0;
      for (const auto& values : per_part) sum += interpolate(profile.sizes, values, size);
      return sum;
    };
    double forward = 0, backward = 0;
    for (auto size : shard_sizes(conditions.config.batch_size, static_cast<size_t>(conditions.devices))) {
      forward = std::max(forward, whole_model(profile.parts.forward_ms, size));
      backward = std::max(backward, whole_model(profile.parts.backward_ms, size));
    }
    double update = 0;
    for (auto part_update : profile.parts.update_ms) update += part_update;
    const double step_ms = profile.set_up_counters.at("broadcast_ms") + forward + backward +
                           profile.set_up_counters.at("reduce_ms") + update;
    return Prediction{step_ms, profile.parts.cut};
  };
  // Memory: every replica the whole model and its gradients (made anew each step) at its shard of
  // the batch, its output kept for its backward and its output's gradient given (the loss is not
  // the replica's); replica 0's optimizer state alone. Device 0 also holds the batch whole and the
  // loss: the other replicas' outputs gathered, the loss over every output and its backward, after
  // the forwards; then the outputs and their gradients through the replicas' backwards.
  predictor.memory = [](const AdviseProfile& profile, const CaseConditions& conditions) {
    const auto& config = conditions.config;
    const auto batch = config.batch_size;
    const auto& apart = profile.memory.loss_apart_for(config.checkpoint);
    auto stages = profile.memory.stages_for(config.checkpoint);
    stages.back() = apart.last_stage;
    MemoryPrediction prediction;
    const auto shards = shard_sizes(batch, static_cast<size_t>(conditions.devices));
    for (size_t r = 0; r < static_cast<size_t>(conditions.devices); ++r) {
      const int64_t shard = r < shards.size() ? shards[r] : 0;
      auto replica = whole_model_memory(profile.memory, stages, config, shard, /*holds_batch=*/false,
                                        /*fresh_gradients=*/true);
      if (r == 0) {
        replica.batch = profile.memory.inputs.at(batch) + profile.memory.targets.at(batch);
        const double own_output = apart.last_stage.output.at(shard);
        const double gathered = apart.last_stage.output.at(batch) - own_output;  // replica 0's output is not copied
        double forwards_kept = 0;
        for (const auto& stage : stages) forwards_kept += stage.kept.at(shard);
        const double loss = forwards_kept + gathered + apart.loss.kept.at(batch) + apart.loss.backward.at(batch);
        // Replica 0's backward starts from its output's gradient, already among the outputs' gradients.
        const double backwards = replica.activations + gathered + apart.last_stage.output.at(batch) - own_output;
        replica.activations = std::max(loss, backwards);
      } else {
        replica.optimizer_state = 0;
      }
      prediction.devices.push_back(replica);
    }
    return prediction;
  };
  return predictor;
}

StrategyInfo data_parallel_info() {
  return StrategyInfo("data_parallel")
      .creates<DataParallel>()
      .summary("one process; broadcast parameters to replicas, scatter, parallel forwards, gather, reduce gradients")
      .order(3)
      .min_devices(2)
      .graph_capturable()
      .device_role("replicas")
      .option(StrategyOption::choice("replicate", "dp-replicate", {"broadcast", "clone"})
                  .help("data_parallel: broadcast (replicas built once, parameters broadcast every\nstep, as PyTorch's "
                        "DataParallel) | clone (LibTorch's data_parallel:\nreplicas cloned every step; GPUs only, no "
                        "CUDA graph); default broadcast")
                  .defaults({"broadcast"}))
      .obstacle([](const CaseConditions& conditions) -> std::optional<CaseObstacle> {
        if (data_parallel_options(conditions.config).replicate != "clone") return std::nullopt;
        // LibTorch's data_parallel builds replicas on the host every step and gathers CUDA tensors only.
        if (conditions.cuda_graph) {
          return CaseObstacle{"data_parallel replicate:clone cannot be captured in a CUDA graph (it builds its "
                              "replicas on the host every step)",
                              /*capture_only=*/true};
        }
        if (conditions.visible_gpus == 0) {
          return CaseObstacle{"needs GPUs, 0 visible (LibTorch's data_parallel gathers CUDA tensors only)"};
        }
        return std::nullopt;
      })
      .predictor(data_parallel_predictor());
}

PARBENCH_REGISTER_STRATEGY(data_parallel_info());

}  // namespace
}  // namespace parbench
