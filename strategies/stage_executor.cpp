#include "strategies/stage_executor.h"

#include "core/counter_table.h"
#include "models/autocast_cache.h"
#include "strategies/optimizer.h"
#include "strategies/training.h"
#include "strategies/worker_thread.h"

#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>

namespace parbench {
namespace {

// How long a stage waits for its neighbour's activation or gradient before it gives up: far
// beyond any stage's step, so only a stage that stopped making progress trips it.
constexpr auto kHandoffTimeout = std::chrono::seconds(300);

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Thrown in a stage whose step was abandoned because another stage failed; the caller
// reports that other stage's error instead.
struct StepAbandoned : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A tensor handed to a neighbouring stage, with the event after which it may be read (none
// off CUDA, where the producer has finished the tensor by the time it hands it over).
struct Parcel {
  torch::Tensor tensor;
  std::optional<c10::Event> ready;
};

// Parcels from one stage to a neighbour, by micro-batch.
class Mailbox {
 public:
  void put(int64_t micro_batch, Parcel parcel) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      parcels_.emplace(micro_batch, std::move(parcel));
    }
    changed_.notify_all();
  }

  // `waited` accumulates the seconds spent waiting.
  Parcel take(int64_t micro_batch, const std::atomic<bool>& abandoned, const std::string& what, double& waited) {
    const auto began = Clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    const bool arrived = changed_.wait_for(lock, kHandoffTimeout, [&] {
      return abandoned.load() || parcels_.count(micro_batch) > 0;
    });
    waited += seconds_since(began);
    if (abandoned.load()) throw StepAbandoned("abandoned");
    if (!arrived) {
      throw std::runtime_error(what + " did not arrive within " + std::to_string(kHandoffTimeout.count()) + " s");
    }
    auto node = parcels_.extract(micro_batch);
    return std::move(node.mapped());
  }

  void wake() {
    { std::lock_guard<std::mutex> lock(mutex_); }
    changed_.notify_all();
  }

  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    parcels_.clear();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int64_t, Parcel> parcels_;
};

// The trace's name of a schedule action (--trace; docs/METRICS.md): "F3 stage0" is micro-batch 3's
// forward on stage 0; B is a whole backward (B and W together), or with zb-h1 the input
// gradient alone, W the weight gradients; "B* stage1" the tutorial's backward over every
// micro-batch.
std::string action_label(const StageAction& action) {
  const auto stage = " stage" + std::to_string(action.stage);
  switch (action.op) {
    case StageOp::kForward: return "F" + std::to_string(action.micro_batch) + stage;
    case StageOp::kBackwardAll: return "B*" + stage;
    case StageOp::kBackwardWeight: return "W" + std::to_string(action.micro_batch) + stage;
    case StageOp::kBackward:
    case StageOp::kBackwardInput:
    default: return "B" + std::to_string(action.micro_batch) + stage;
  }
}

c10::Stream current_stream(const torch::Device& device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
}

}  // namespace

struct StageExecutor::Impl {
  // One stage: its part of the model, its streams (CUDA only), its parameters, and what one
  // step keeps per micro-batch until the backward.
  struct Stage {
    explicit Stage(Partition part) : partition(std::move(part)) {}
    Partition partition;
    // Compute streams: micro-batch m computes on lanes[m % lanes.size()] (CUDA only). With two
    // lanes one micro-batch's forward can run beside another's backward.
    std::vector<c10::Stream> lanes;
    std::optional<c10::Stream> send, receive;
    // Where the chain of forwards (which update batch-norm statistics) and the chain of
    // backwards (which add into the same gradients) stand, so that each stays in order
    // across lanes. Unused with one lane.
    std::optional<c10::Event> forwards_done, backwards_done;
    std::vector<torch::Tensor> parameters;
    std::unique_ptr<Optimizer> optimizer;  // over `parameters`, on the stage's device
    std::vector<torch::Tensor> inputs, outputs;  // per micro-batch: the input leaf, the output (or loss)
    std::vector<torch::Tensor> output_gradients;  // zb-h1: per micro-batch, from B for its W
    std::vector<torch::Tensor> losses;           // last stage: detached, weighted micro-batch losses
    torch::Tensor loss;                          // last stage: the step's loss
    std::vector<c10::Event> finished;            // recorded on every stream at the end of the step
    Mailbox activations;                         // from the previous stage
    Mailbox gradients;                           // from the next stage
    // Host seconds over all steps: issuing forwards, issuing backwards (mailbox waits
    // excluded, counted apart).
    double host_seconds[2] = {0, 0};
    double host_wait_seconds = 0;
  };

  LossKind loss_kind;
  int64_t steps = 0;
  std::optional<c10::ScalarType> autocast_dtype;
  std::deque<Stage> stages;  // a deque: a Stage holds mutexes and cannot move
  // One host thread per device; device d runs stages d, d+D, ... (more than one with chunks).
  std::vector<std::unique_ptr<WorkerThread>> devices;
  std::atomic<bool> abandoned{false};

  // The step's batch, cut into micro-batches.
  std::vector<torch::Tensor> micro_inputs, micro_targets;
  torch::Tensor targets;
  double batch_size = 0;

  bool on_cuda() const { return !stages.front().lanes.empty(); }

  static const c10::Stream& lane(const Stage& stage, int64_t m) {
    return stage.lanes[static_cast<size_t>(m) % stage.lanes.size()];
  }

  // Makes micro-batch m's lane current (on CUDA), behind the last link of `chain`.
  static void enter_lane(const Stage& stage, int64_t m, const std::optional<c10::Event>& chain,
                         std::optional<c10::StreamGuard>& guard) {
    if (stage.lanes.empty()) return;
    if (chain) chain->block(lane(stage, m));
    guard.emplace(lane(stage, m));
  }

  // Records micro-batch m's lane as `chain`'s last link.
  static void extend_chain(const Stage& stage, int64_t m, std::optional<c10::Event>& chain) {
    if (stage.lanes.size() < 2) return;
    chain.emplace(c10::DeviceType::CUDA);
    chain->record(lane(stage, m));
  }

  // Every stream the stage uses.
  static std::vector<c10::Stream> streams_of(const Stage& stage) {
    auto streams = stage.lanes;
    if (stage.send) streams.insert(streams.end(), {*stage.send, *stage.receive});
    return streams;
  }

  std::string name(size_t s) const { return "pipeline stage " + std::to_string(s); }

  // Copies micro-batch m's `tensor` from stage `from` to stage `to`, on `from`'s send stream
  // and `to`'s receive stream, behind `from`'s compute.
  Parcel carry(size_t from, size_t to, int64_t m, const torch::Tensor& tensor) {
    RECORD_USER_SCOPE("send " + std::string(to > from ? "activation" : "gradient") + std::to_string(m) + " stage" +
                      std::to_string(from) + "->" + std::to_string(to));
    const auto destination = stages[to].partition.device;
    if (!on_cuda()) return {tensor.to(destination), std::nullopt};
    auto& source = stages[from];
    c10::Event computed(c10::DeviceType::CUDA);
    computed.record(lane(source, m));
    computed.block(*source.send);
    tensor.record_stream(*source.send);  // the copy reads it there
    torch::Tensor received;
    c10::Event arrived(c10::DeviceType::CUDA);
    if (destination == source.partition.device) {
      // Two stages on one GPU (tests on a one-GPU machine): `to` would hand back the same
      // tensor, unordered with the receiver, so the send stream copies it and the receiver
      // waits for that copy.
      c10::StreamGuard guard(*source.send);
      received = tensor.clone();
      arrived.record(*source.send);
      return {received, std::move(arrived)};
    }
    {
      // A copy between devices runs on the source's current stream after a barrier with the
      // destination's current stream, which then waits for it: with the receive stream
      // current there, the copy does not wait for the destination's queued compute.
      c10::MultiStreamGuard guard(std::vector<c10::Stream>{*source.send, *stages[to].receive});
      received = tensor.to(destination, /*non_blocking=*/true);
    }
    arrived.record(*stages[to].receive);
    return {received, std::move(arrived)};
  }

  // A parcel's tensor, ready for micro-batch m's lane on stage `s`.
  torch::Tensor unpack(size_t s, int64_t m, Parcel parcel) {
    if (parcel.ready) {
      const auto& compute = lane(stages[s], m);
      parcel.ready->block(compute);
      parcel.tensor.record_stream(compute);
    }
    return parcel.tensor;
  }

  void forward(size_t s, int64_t m) {
    auto& stage = stages[s];
    std::optional<c10::StreamGuard> on_lane;
    enter_lane(stage, m, stage.forwards_done, on_lane);
    torch::Tensor input;
    if (s == 0) {
      input = micro_inputs[m];
    } else {
      const auto what = name(s) + "'s activations of micro-batch " + std::to_string(m);
      input = unpack(s, m, stage.activations.take(m, abandoned, what, stage.host_wait_seconds)).detach().requires_grad_();
      stage.inputs[m] = input;
    }
    torch::Tensor output;
    {
      AutocastScope autocast(stage.partition.device.type(), autocast_dtype);
      output = stage.partition.forward(input);
    }
    stage.outputs[m] = output;
    extend_chain(stage, m, stage.forwards_done);
    if (s + 1 < stages.size()) stages[s + 1].activations.put(m, carry(s, s + 1, m, output.detach()));
  }

  // The loss of micro-batch m, weighted so that the micro-batch losses add up to the batch mean.
  torch::Tensor micro_loss(int64_t m) {
    return compute_loss(stages.back().outputs[m], micro_targets[m], loss_kind) *
           (static_cast<double>(micro_targets[m].size(0)) / batch_size);
  }

  void send_input_gradient(size_t s, int64_t m) {
    auto& stage = stages[s];
    if (s > 0) stages[s - 1].gradients.put(m, carry(s, s - 1, m, stage.inputs[m].grad()));
    stage.inputs[m] = torch::Tensor();
    stage.outputs[m] = torch::Tensor();
  }

  // Backward ops run on the stream their forward ran on: micro-batch m's lane.
  void backward(size_t s, int64_t m) {
    auto& stage = stages[s];
    std::optional<c10::StreamGuard> on_lane;
    enter_lane(stage, m, stage.backwards_done, on_lane);
    if (s + 1 == stages.size()) {
      auto loss = micro_loss(m);
      loss.backward();
      stage.losses.push_back(loss.detach());
    } else {
      const auto what = name(s) + "'s output gradient of micro-batch " + std::to_string(m);
      auto gradient = unpack(s, m, stage.gradients.take(m, abandoned, what, stage.host_wait_seconds));
      torch::autograd::backward({stage.outputs[m]}, {gradient});
    }
    extend_chain(stage, m, stage.backwards_done);
    send_input_gradient(s, m);
  }

  // zb-h1's B: the gradient of the stage's input alone, sent at once; the graph stays for W. The
  // last stage's root is its micro-batch loss (its gradient then undefined, i.e. one).
  void backward_input(size_t s, int64_t m) {
    auto& stage = stages[s];
    std::optional<c10::StreamGuard> on_lane;
    enter_lane(stage, m, stage.backwards_done, on_lane);
    if (s + 1 == stages.size()) {
      stage.outputs[m] = micro_loss(m);
      stage.losses.push_back(stage.outputs[m].detach());
    } else {
      const auto what = name(s) + "'s output gradient of micro-batch " + std::to_string(m);
      stage.output_gradients[m] = unpack(s, m, stage.gradients.take(m, abandoned, what, stage.host_wait_seconds));
    }
    if (s > 0) {
      const auto input_gradient = torch::autograd::grad({stage.outputs[m]}, {stage.inputs[m]},
                                                        {stage.output_gradients[m]}, /*retain_graph=*/true)[0];
      stages[s - 1].gradients.put(m, carry(s, s - 1, m, input_gradient));
    }
    extend_chain(stage, m, stage.backwards_done);
  }

  // zb-h1's W: the gradients of the stage's weights, through the graph B kept, which goes.
  void backward_weight(size_t s, int64_t m) {
    auto& stage = stages[s];
    std::optional<c10::StreamGuard> on_lane;
    enter_lane(stage, m, stage.backwards_done, on_lane);
    torch::autograd::backward({stage.outputs[m]}, {stage.output_gradients[m]}, /*retain_graph=*/false,
                              /*create_graph=*/false, stage.parameters);
    extend_chain(stage, m, stage.backwards_done);
    stage.inputs[m] = torch::Tensor();
    stage.outputs[m] = torch::Tensor();
    stage.output_gradients[m] = torch::Tensor();
  }

  // The tutorial's last stage: one loss over the concatenated outputs. Its gradients with respect
  // to each micro-batch's output come first (the loss and the concatenation alone), then each
  // micro-batch's backward, last first, so the previous stage starts on a gradient as soon as it
  // is sent: the same sums as one backward through everything.
  void backward_all(size_t s) {
    auto& stage = stages[s];
    // On the first lane (current), behind every forward.
    if (stage.forwards_done) stage.forwards_done->block(stage.lanes.front());
    auto loss = compute_loss(torch::cat(stage.outputs), targets, loss_kind);
    const auto output_gradients = torch::autograd::grad({loss}, stage.outputs);
    stage.losses.push_back(loss.detach());
    std::optional<c10::Event> gradients_ready;
    extend_chain(stage, 0, gradients_ready);
    for (int64_t m = static_cast<int64_t>(stage.outputs.size()); m-- > 0;) {
      RECORD_USER_SCOPE(action_label({StageOp::kBackward, m, s}));
      std::optional<c10::StreamGuard> on_lane;
      enter_lane(stage, m, stage.backwards_done, on_lane);
      if (gradients_ready) gradients_ready->block(lane(stage, m));
      torch::autograd::backward({stage.outputs[m]}, {output_gradients[m]});
      extend_chain(stage, m, stage.backwards_done);
      send_input_gradient(s, m);
    }
  }

  // Device d's program, over its stages (d, d+D, ...), which share the device's lanes.
  void run_device(size_t d, const StageProgram& program, bool autocast_cache) {
    std::vector<size_t> own;
    for (size_t s = d; s < stages.size(); s += devices.size()) own.push_back(s);
    const auto& lanes = stages[d].lanes;
    std::optional<c10::StreamGuard> on_first_lane;
    if (on_cuda()) on_first_lane.emplace(lanes.front());
    AutocastCacheSetting cache(autocast_cache);
    for (auto s : own) {
      stages[s].forwards_done.reset();
      stages[s].backwards_done.reset();
      for (auto& parameter : stages[s].parameters) parameter.mutable_grad().reset();
    }
    for (const auto& action : program) {
      auto& stage = stages[action.stage];
      const auto began = Clock::now();
      const double waited_before = stage.host_wait_seconds;
      RECORD_USER_SCOPE(action_label(action));
      switch (action.op) {
        case StageOp::kForward: forward(action.stage, action.micro_batch); break;
        case StageOp::kBackward: backward(action.stage, action.micro_batch); break;
        case StageOp::kBackwardAll: backward_all(action.stage); break;
        case StageOp::kBackwardInput: backward_input(action.stage, action.micro_batch); break;
        case StageOp::kBackwardWeight: backward_weight(action.stage, action.micro_batch); break;
      }
      stage.host_seconds[action.op == StageOp::kForward ? 0 : 1] +=
          seconds_since(began) - (stage.host_wait_seconds - waited_before);
    }
    // The updates, on the first lane, behind every lane's work.
    for (size_t l = 1; l < lanes.size(); ++l) {
      c10::Event lane_done(c10::DeviceType::CUDA);
      lane_done.record(lanes[l]);
      lane_done.block(lanes.front());
    }
    for (auto s : own) {
      auto& stage = stages[s];
      RECORD_USER_SCOPE("optimizer stage" + std::to_string(s));
      stage.optimizer->step();
      if (s + 1 == stages.size()) stage.loss = torch::stack(stage.losses).sum();
      for (const auto& stream : streams_of(stage)) {
        stage.finished.emplace_back(c10::DeviceType::CUDA);
        stage.finished.back().record(stream);
      }
    }
  }
};

StageExecutor::StageExecutor(std::vector<Partition> partitions, LossKind loss, OptimizerKind optimizer,
                             double learning_rate, std::optional<c10::ScalarType> autocast_dtype, int lanes,
                             size_t devices)
    : impl_(std::make_unique<Impl>()) {
  TORCH_CHECK(!partitions.empty(), "a staged model needs at least one stage");
  TORCH_CHECK(lanes == 1 || lanes == 2, "a stage computes on 1 or 2 lanes, got ", lanes);
  if (devices == 0) devices = partitions.size();
  TORCH_CHECK(partitions.size() % devices == 0, partitions.size(), " stages do not divide over ", devices, " devices");
  impl_->loss_kind = loss;
  impl_->autocast_dtype = autocast_dtype;
  for (size_t s = 0; s < partitions.size(); ++s) {
    auto& stage = impl_->stages.emplace_back(std::move(partitions[s]));
    const auto device = stage.partition.device;
    if (device.is_cuda()) {
      c10::impl::VirtualGuardImpl guard(device.type());
      // A device's stages share its lanes, so its program's order is the order they compute in.
      if (s < devices) {
        for (int l = 0; l < lanes; ++l) stage.lanes.push_back(guard.getStreamFromGlobalPool(device));
      } else {
        TORCH_CHECK(device == impl_->stages[s % devices].partition.device, "stage ", s, " is on ", device.str(),
                    ", not on its device's ", impl_->stages[s % devices].partition.device.str());
        stage.lanes = impl_->stages[s % devices].lanes;
      }
      stage.send = guard.getStreamFromGlobalPool(device);
      stage.receive = guard.getStreamFromGlobalPool(device);
    }
    stage.parameters = stage.partition.parameters();
    stage.optimizer = std::make_unique<Optimizer>(stage.parameters, optimizer, learning_rate);
  }
  for (size_t d = 0; d < devices; ++d) impl_->devices.push_back(std::make_unique<WorkerThread>());
}

StageExecutor::~StageExecutor() = default;

void StagedStrategy::set_up_stages(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
                                   const RunConfig& config, int64_t micro_batch, int lanes, size_t chunks) {
  devices_ = devices;
  config_ = config;
  model_ = make_model(torch::kCPU);  // whole on the host, then each stage to its device
  std::vector<torch::Device> part_devices;
  for (size_t part = 0; part < devices.size() * chunks; ++part) part_devices.push_back(devices[part % devices.size()]);
  // With chunks each device holds several stages: the count asked for is of stages, not devices.
  if (chunks > 1 && part_devices.size() > model_->stages().size()) {
    throw std::invalid_argument(model_->name() + " has " + std::to_string(model_->stages().size()) +
                                " stages, fewer than the " + std::to_string(part_devices.size()) + " stages that --chunks=" +
                                std::to_string(chunks) + " asks for on " + std::to_string(devices.size()) +
                                " devices (" + std::to_string(chunks) + " per device)");
  }
  auto partitions = partition_model(*model_, part_devices, config, micro_batch, &cut_);
  executor_ = std::make_unique<StageExecutor>(std::move(partitions), config.loss, config.optimizer, config.learning_rate,
                                              model_->autocast_dtype(), lanes, devices.size());
}

std::string StagedStrategy::cut_text() const { return format_cut(cut_, model_->stage_groups()); }

std::vector<DeviceModelStates> StageExecutor::model_states() const {
  std::vector<DeviceModelStates> states(impl_->devices.size());
  for (size_t s = 0; s < impl_->stages.size(); ++s) {
    const auto& stage = impl_->stages[s];
    auto& device = states[s % states.size()];
    device.parameters.insert(device.parameters.end(), stage.parameters.begin(), stage.parameters.end());
    const auto state = stage.optimizer->state();
    device.optimizer_state.insert(device.optimizer_state.end(), state.begin(), state.end());
  }
  return states;
}

// What host_counters() reports: model_parallel's and pipeline's (docs/METRICS.md).
PARBENCH_DECLARE_COUNTER(Counter("host_forward_ms").unit("ms").lower_is_better().per_stage()
                             .means("host time per step of the stage's thread issuing forwards"));
PARBENCH_DECLARE_COUNTER(Counter("host_backward_ms").unit("ms").lower_is_better().per_stage()
                             .means("host time per step of the stage's thread issuing backwards"));
PARBENCH_DECLARE_COUNTER(Counter("host_wait_ms").unit("ms").lower_is_better().per_stage()
                             .means("host time per step the stage's thread waited for its inputs"));

std::map<std::string, double> StageExecutor::host_counters() const {
  std::map<std::string, double> counters;
  if (impl_->steps == 0) return counters;
  const double per_step_ms = 1e3 / static_cast<double>(impl_->steps);
  for (size_t s = 0; s < impl_->stages.size(); ++s) {
    const auto& stage = impl_->stages[s];
    const auto suffix = "_stage" + std::to_string(s);
    counters["host_forward_ms" + suffix] = stage.host_seconds[0] * per_step_ms;
    counters["host_backward_ms" + suffix] = stage.host_seconds[1] * per_step_ms;
    counters["host_wait_ms" + suffix] = stage.host_wait_seconds * per_step_ms;
  }
  return counters;
}

torch::Device StageExecutor::input_device() const { return impl_->stages.front().partition.device; }
torch::Device StageExecutor::target_device() const { return impl_->stages.back().partition.device; }

torch::Tensor StageExecutor::train_step(const Batch& batch, int64_t split_size,
                                        const std::vector<StageProgram>& programs) {
  auto& impl = *impl_;
  impl.micro_inputs = batch.inputs.split(split_size);
  impl.micro_targets = batch.targets.split(split_size);
  impl.targets = batch.targets;
  impl.batch_size = static_cast<double>(batch.inputs.size(0));
  TORCH_CHECK(programs.size() == impl.devices.size(), "the schedule has ", programs.size(), " programs for ",
              impl.devices.size(), " devices");
  TORCH_CHECK(static_cast<int64_t>(impl.micro_inputs.size()) == program_micro_batches(programs), "a batch of ",
              batch.inputs.size(0), " in micro-batches of ", split_size, " makes ", impl.micro_inputs.size(),
              ", the schedule was built for ", program_micro_batches(programs));
  impl.abandoned = false;
  for (auto& stage : impl.stages) {
    stage.inputs.assign(impl.micro_inputs.size(), torch::Tensor());
    stage.outputs.assign(impl.micro_inputs.size(), torch::Tensor());
    stage.output_gradients.assign(impl.micro_inputs.size(), torch::Tensor());
    stage.losses.clear();
    stage.finished.clear();
    stage.activations.clear();
    stage.gradients.clear();
  }

  // Every stage stream starts behind the work queued so far on its device's current stream (the
  // batch's copy, for one), before any stage thread runs: a neighbour may copy into a stage's
  // receive stream before that stage's own thread starts, and under capture every stream must
  // have joined the capture by then.
  if (impl.on_cuda()) {
    for (auto& stage : impl.stages) {
      c10::Event caller_ready(c10::DeviceType::CUDA);
      caller_ready.record(current_stream(stage.partition.device));
      for (const auto& stream : Impl::streams_of(stage)) caller_ready.block(stream);
    }
  }
  ++impl.steps;
  const bool autocast_cache = at::autocast::is_autocast_cache_enabled();
  for (size_t d = 0; d < impl.devices.size(); ++d) {
    impl.devices[d]->start([&impl, &programs, d, autocast_cache] {
      try {
        impl.run_device(d, programs[d], autocast_cache);
      } catch (...) {
        impl.abandoned = true;
        for (auto& stage : impl.stages) {
          stage.activations.wake();
          stage.gradients.wake();
        }
        throw;
      }
    });
  }
  std::exception_ptr first_error;
  for (auto& device : impl.devices) {
    const auto error = device->finish();
    if (!error) continue;
    try {
      std::rethrow_exception(error);
    } catch (const StepAbandoned&) {
      // Another device's error is the one to report.
    } catch (...) {
      if (!first_error) first_error = error;
    }
  }
  if (first_error) std::rethrow_exception(first_error);

  for (auto& stage : impl.stages) {
    const auto current = current_stream(stage.partition.device);
    for (const auto& finished : stage.finished) finished.block(current);
    stage.inputs.clear();
    stage.outputs.clear();
    stage.output_gradients.clear();
  }
  return impl.stages.back().loss;
}

}  // namespace parbench
