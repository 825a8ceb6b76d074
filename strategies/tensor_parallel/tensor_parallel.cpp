// Tensor parallelism as Megatron-LM does it: one process per device (a rank), each holding a
// 1/degree slice of every layer, as the model family's plan splits it (models/tensor_parallel/:
// plan.h, the GPT's and the Llama's plans beside the models: column-parallel and
// row-parallel layers, the embedding and head split by vocabulary, a cross-entropy that never
// gathers the logits). Every rank runs the whole batch:
// each draws --batch/degree sequences and the ranks all-gather them, as Megatron's ranks share
// one data loader's batch, so --batch is the global batch. Each rank builds the whole seeded
// model on the CPU and keeps its shards, so its initial weights are single's, split.
//
// --sequence-parallel=on: LayerNorms, the residual adds and the row-parallel biases run on a
// 1/degree slice of the sequence; each all-reduce becomes an all-gather before the
// column-parallel layer and a reduce-scatter after the row-parallel one (the same bytes, less
// activation memory). The parameters those slices touch (LayerNorms, biases, the position
// embedding) then get partial gradients, summed across ranks after backward.
#include "core/counter_table.h"
#include "core/device_timer.h"
#include "strategies/distributed/rank_setup.h"
#include "strategies/distributed/rehearsal_backend.h"
#include "strategies/distributed/world.h"
#include "strategies/optimizer.h"
#include "strategies/prediction.h"
#include "strategies/strategy.h"
#include "models/tensor_parallel/layers.h"
#include "models/tensor_parallel/plan.h"
#include "strategies/training.h"

#include <ATen/record_function.h>
#ifdef PARBENCH_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <cstdio>
#include <optional>
#include <stdexcept>

namespace parbench {
namespace {

PARBENCH_DECLARE_COUNTER(Counter("tp_comm_mib_per_step").unit("MiB").lower_is_better()
                             .means("tensor_parallel: bytes one rank sends per step by the ring algorithms' counts, / 2^20"));
PARBENCH_DECLARE_COUNTER(Counter("tp_comm_ms").unit("ms").lower_is_better()
                             .means("tensor_parallel, GPUs, eager: the compute stream's waits on the last step's collectives: the exposed communication"));
PARBENCH_DECLARE_COUNTER(Counter("tp_gather_scatter_mib_per_step").unit("MiB").lower_is_better()
                             .means("tensor_parallel: of tp_comm_mib_per_step, the all-gathers' and reduce-scatters'"));
PARBENCH_DECLARE_COUNTER(Counter("tp_collectives_per_step").unit("count").lower_is_better()
                             .means("tensor_parallel: collectives one rank issues per step"));

bool sequence_parallel_on(const RunConfig& config) { return option_choice(config, "sp", "off") == "on"; }

// --tp-halves=on: the batch in two halves interleaved collective by collective
// (TensorParallelGptImpl::forward_halves), each on its own CUDA stream.
bool halves_on(const RunConfig& config) { return option_choice(config, "halves", "off") == "on"; }

class TensorParallel final : public Strategy {
 public:
  TensorParallel() = default;
  // One rank of `degree` rehearsed alone on its one device (--advise's profile): rank 0's shards,
  // its collectives sent nowhere (RehearsalBackend) but tallied.
  explicit TensorParallel(int rehearsed_degree) : rehearsal_(c10::make_intrusive<RehearsalBackend>(rehearsed_degree)) {}

  void setup(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
             const RunConfig& config) override {
    devices_ = devices;
    config_ = config;
    if (rehearsal_) {
      TORCH_CHECK(devices.size() == 1, "a rehearsed tensor_parallel rank runs on one device, got ", devices.size());
      group_ = {rehearsal_.get(), 0, rehearsal_->getSize(), &tally_, nullptr};
    } else {
      world_ = &rank_world("tensor_parallel", config, devices);
      group_ = {world_->backend().get(), world_->rank(), world_->size(), &tally_, &clock_};
    }
    // The whole model, built and seeded on the CPU as single's is; only this rank's shards reach
    // the device. Built on the device instead, the whole model would sit there beside the shards
    // during set-up, a peak the case's memory would count (gpt-6.7b: 27 GB on every rank) and
    // that a model larger than one GPU could not reach.
    const auto obstacle =
        tensor_parallel_obstacle_for(config.model, group_.degree, config.seq_len, sequence_parallel_on(config));
    if (!obstacle.empty()) throw std::invalid_argument(obstacle);
    auto whole = make_model(torch::kCPU);
    auto sharded = find_tensor_parallel_plan(config.model)->shard(*whole, group_, sequence_parallel_on(config));
    whole.reset();
    sharded->module().to(devices.front());
    prepare_model(*sharded, config.precision);
    model_ = sharded;
    model_ptr_ = sharded.get();
    kinds_ = sharded->shard_kinds();
    optimizer_ = std::make_unique<Optimizer>(sharded->module().parameters(), config.optimizer, config.learning_rate,
                                             Optimizer::SgdKernels::kPerParameter);
    halves_ = halves_on(config);
#ifdef PARBENCH_WITH_CUDA
    if (halves_ && devices.front().is_cuda()) {
      second_stream_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, devices.front().index());
    }
#endif
  }

  torch::Device input_device() const override { return devices_.front(); }
  torch::Device target_device() const override { return devices_.front(); }

  torch::Tensor train_step(const Batch& batch) override {
    tally_.clear();
    clock_.start_step();
    optimizer_->zero_grad();
    // Every rank's share of the batch, in rank order: the whole batch on every rank.
    const auto tokens = all_gather_first_dim(batch.inputs, group_);
    const auto targets = all_gather_first_dim(batch.targets, group_);
    torch::Tensor loss;
    if (halves_) {
      loss = halves_step(tokens, targets);
    } else {
      {
        RECORD_USER_SCOPE("forward");
        const auto logits = model_->forward(tokens);  // (T, N, V/w)
        loss = vocab_parallel_cross_entropy(logits.flatten(0, 1), targets.t().flatten(), group_);
      }
      RECORD_USER_SCOPE("backward");
      loss.backward();
    }
    model_ptr_->finish_gradients();
    RECORD_USER_SCOPE("optimizer");
    optimizer_->step();
    last_step_ = tally_;
    return loss.detach();
  }

  std::vector<DeviceModelStates> model_states() const override {
    return {{optimizer_->parameters(), optimizer_->state()}};
  }

  std::vector<torch::Tensor> parameters_for_check() const override {
    std::vector<torch::Tensor> whole;
    const auto parameters = model_->module().parameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      whole.push_back(gather_shards(parameters[i].detach(), kinds_[i], untallied_group()));
    }
    return whole;
  }

  std::vector<torch::Tensor> gradients_for_check() const override {
    std::vector<torch::Tensor> whole;
    const auto parameters = model_->module().parameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      whole.push_back(gather_shards(parameters[i].grad(), kinds_[i], untallied_group()));
    }
    return whole;
  }

  std::map<std::string, std::string> describe() const override {
    return {{"backend", world_ != nullptr ? world_->backend_name() : rehearsal_->getBackendName()},
            {"degree", std::to_string(group_.degree)},
            {"sp", sequence_parallel_on(config_) ? "on" : "off"},
            {"halves", halves_ ? (second_stream_ ? "on, two CUDA streams" : "on, one stream") : "off"}};
  }

  std::map<std::string, double> counters() const override {
    std::map<std::string, double> values = {{"tp_comm_mib_per_step", last_step_.bytes / (1 << 20)},
                                            {"tp_gather_scatter_mib_per_step", last_step_.gather_scatter_bytes / (1 << 20)},
                                            {"tp_collectives_per_step", static_cast<double>(last_step_.calls)}};
    if (const auto waited = clock_.last_step_ms()) values["tp_comm_ms"] = *waited;
    return values;
  }

 private:
  // The forward and backward of the batch in two halves (forward_halves): the second half's work
  // on a stream of its own, forked from the current stream and joined back after the forward
  // and again after the backward, which runs each half's nodes on their forward's stream. The
  // loss is the halves' mean of their means (the halves are equal).
  torch::Tensor halves_step(const torch::Tensor& tokens, const torch::Tensor& targets) {
    std::vector<int64_t> streams;
#ifdef PARBENCH_WITH_CUDA
    std::optional<c10::cuda::CUDAStream> first;
    if (second_stream_) {
      first = c10::cuda::getCurrentCUDAStream(devices_.front().index());
      // The pool hands its streams out in turn, so the step may run on this very one (a graph's
      // capture stream is a pool stream too): then another, or both halves would share it.
      while (*second_stream_ == *first) {
        second_stream_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, devices_.front().index());
      }
      stream_waits_for(*second_stream_, *first);  // the second half starts after what the step did so far
      streams = {first->id(), second_stream_->id()};
    }
#endif
    std::vector<torch::Tensor> losses(2);
    {
      RECORD_USER_SCOPE("forward");
      const auto logits = model_ptr_->forward_halves(tokens, streams);
      const auto target_halves = targets.chunk(2, 0);
      for_each_half(streams, devices_.front(), [&](size_t half) {
        losses[half] = vocab_parallel_cross_entropy(logits[half].flatten(0, 1), target_halves[half].t().flatten(), group_);
      });
#ifdef PARBENCH_WITH_CUDA
      if (second_stream_) stream_waits_for(*first, *second_stream_);
#endif
    }
    const auto loss = (losses[0] + losses[1]) / 2;
    {
      RECORD_USER_SCOPE("backward");
      loss.backward();
    }
#ifdef PARBENCH_WITH_CUDA
    if (second_stream_) stream_waits_for(*first, *second_stream_);
#endif
    return loss;
  }

  // Gathers for the tests' checks are not the step's communication.
  TensorParallelGroup untallied_group() const {
    auto group = group_;
    group.tally = nullptr;
    group.clock = nullptr;
    return group;
  }

  RunConfig config_;
  World* world_ = nullptr;                       // null when rehearsed
  c10::intrusive_ptr<RehearsalBackend> rehearsal_;  // set when rehearsed
  TensorParallelGroup group_;
  CollectiveTally tally_, last_step_;
  CollectiveClock clock_;
  TensorParallelModel* model_ptr_ = nullptr;
  std::vector<ShardKind> kinds_;                 // per parameter, in the model's order
  std::unique_ptr<Optimizer> optimizer_;
  bool halves_ = false;
#ifdef PARBENCH_WITH_CUDA
  std::optional<c10::cuda::CUDAStream> second_stream_;  // halves on a GPU
#else
  std::optional<int> second_stream_;  // never set off CUDA
#endif
};

// Why a case cannot run, from its model's declaration and shape alone.
std::optional<CaseObstacle> tensor_parallel_obstacle_in(const CaseConditions& conditions) {
  const auto& config = conditions.config;
  const auto* plan = find_tensor_parallel_plan(config.model);
  if (plan == nullptr) {
    return CaseObstacle{"tensor_parallel has a plan for the " + tensor_parallel_families() + " families; " +
                        config.model + " has none"};
  }
  if (conditions.named_batch % conditions.devices != 0) {
    return CaseObstacle{"tensor_parallel's ranks each draw --batch/" + std::to_string(conditions.devices) +
                        " sequences of the shared batch: the batch " + std::to_string(conditions.named_batch) +
                        " must divide by the degree"};
  }
  const auto reason = plan->obstacle(config.model, conditions.devices, config.seq_len, sequence_parallel_on(config));
  if (!reason.empty()) return CaseObstacle{reason};
  if (halves_on(config)) {
    if (!plan->halves) return CaseObstacle{"--tp-halves=on: the " + plan->family + " plan has no halves"};
    if (conditions.named_batch % 2 != 0) {
      return CaseObstacle{"--tp-halves=on cuts the batch into two halves: the batch " +
                          std::to_string(conditions.named_batch) + " must be even"};
    }
    if (config.checkpoint != Checkpointing::kOff) {
      return CaseObstacle{"--tp-halves=on interleaves the halves' forwards collective by collective, which "
                          "--checkpoint=" + to_string(config.checkpoint) + "'s recomputed blocks would not; use --checkpoint=off"};
    }
  }
  return std::nullopt;
}

// --advise (docs/METRICS.md, "Predicted step time" and "Predicted peak memory"): one rank
// rehearsed alone on one GPU (RehearsalBackend: its collectives sent nowhere but tallied) gives
// its own compute, the part of each layer split by the degree and the part every rank runs whole
// alike (LayerNorms, residual adds, casts and the loss, whole without sequence parallelism), and
// its memory. Its collectives are priced at the times of one all-reduce, one all-gather and one
// reduce-scatter of a (T, N, d) activation of the whole batch across the ranks' GPUs, the message
// each layer sends, timed apart.
std::string rehearsal_key(const CaseConditions& conditions) {
  const auto& config = conditions.config;
  return "tensor_parallel/" + config.model + "/degree:" + std::to_string(conditions.devices) +
         "/batch:" + std::to_string(conditions.named_batch) + "/seq:" + std::to_string(config.seq_len) +
         "/precision:" + to_string(config.precision) + "/sp:" + (sequence_parallel_on(config) ? "on" : "off") +
         "/checkpoint:" + to_string(config.checkpoint) + "/optimizer:" + to_string(config.optimizer) +
         (halves_on(config) ? "/halves:on" : "");
}

// One (T, N, d) activation of the whole batch in the layers' type (autocast's, or fp32), the
// message of each layer's collective, as a collective of `kind`.
CollectiveMessage activation_message(const CaseConditions& conditions, CollectiveKind kind) {
  const auto& config = conditions.config;
  const auto* plan = find_tensor_parallel_plan(config.model);
  if (plan == nullptr) throw std::invalid_argument(config.model + " has no tensor-parallel plan");
  const auto dtype = config.precision == Precision::kBFloat16 ? c10::ScalarType::BFloat16 : c10::ScalarType::Float;
  return {kind,
          conditions.named_batch * config.seq_len * plan->width(config.model) * static_cast<int64_t>(c10::elementSize(dtype)),
          dtype};
}

constexpr CollectiveKind kActivationCollectives[] = {CollectiveKind::kAllReduce, CollectiveKind::kAllGather,
                                                     CollectiveKind::kReduceScatter};

const Rehearsal& rehearsal_of(const AdviseProfile& profile, const CaseConditions& conditions) {
  const auto found = profile.rehearsals.find(rehearsal_key(conditions));
  if (found == profile.rehearsals.end()) throw std::invalid_argument("its rank was not rehearsed");
  return found->second;
}

// The rehearsed step plus its collectives. The tally counts ring bytes: an all-reduce of a whole
// N bytes 2 (w-1)/w N, an all-gather or a reduce-scatter (w-1)/w N. So the all-reduces' tallied
// bytes are that many activation-sized all-reduces times 2 (w-1)/w N, each at the all-reduce's
// time; the all-gathers' and reduce-scatters' (sequence parallelism's, in equal numbers), that
// many of either times (w-1)/w N, each at the mean of the two's times. Timed each on its own,
// since at these sizes a collective's fixed cost matters: sequence parallelism sends the same
// bytes as all-reduces in twice the calls. None of it counted as hidden: the column-parallel
// layers' backward overlaps its collective with their weight gradient, but NCCL then shares the
// SMs (measured on 2 H200s: 11.2 of about 13.4 ms still exposed).
double tensor_parallel_step_ms(const AdviseProfile& profile, const CaseConditions& conditions) {
  // Measured on 2 H200s (gpt2-medium, bf16, sp on): a model that hid each half's collectives behind
  // the other half's compute put these cases 19% (graphed) and 36% (eager, host-paced) below
  // their steps; pricing them as the whole batch's would be a guess, not yet measured.
  const auto& rehearsal = rehearsal_of(profile, conditions);
  if (halves_on(conditions.config)) {
    // What was measured is still worth saying: the rank's compute with nothing sent, a floor
    // under the step that its communication can only raise.
    char compute[160];
    std::snprintf(compute, sizeof compute, "; the rank's compute alone, rehearsed with nothing sent, took %.2f ms",
                  rehearsal.step_ms);
    throw std::invalid_argument(std::string("--tp-halves=on cases' steps are not predicted (their memory is)") + compute);
  }
  std::map<CollectiveKind, double> message_ms;
  int64_t message_bytes = 0;
  for (const auto kind : kActivationCollectives) {
    const auto message = activation_message(conditions, kind);
    const auto timed = profile.collective_ms.find(message);
    if (timed == profile.collective_ms.end()) {
      throw std::invalid_argument("its ranks' " + to_string(kind) + " was not timed");
    }
    message_ms[kind] = timed->second;
    message_bytes = message.bytes;
  }
  const double w = conditions.devices;
  const double whole = static_cast<double>(message_bytes);
  const double ring_bytes = rehearsal.counters.at("tp_comm_mib_per_step") * (1 << 20);
  const double gather_scatter_bytes = rehearsal.counters.at("tp_gather_scatter_mib_per_step") * (1 << 20);
  const double all_reduces = (ring_bytes - gather_scatter_bytes) / (2.0 * (w - 1.0) / w * whole);
  const double gathers_and_scatters = gather_scatter_bytes / ((w - 1.0) / w * whole);
  const double gather_or_scatter_ms =
      (message_ms[CollectiveKind::kAllGather] + message_ms[CollectiveKind::kReduceScatter]) / 2.0;
  return rehearsal.step_ms + all_reduces * message_ms[CollectiveKind::kAllReduce] +
         gathers_and_scatters * gather_or_scatter_ms;
}

// Memory per rank: the parameters each keeps (shard_kind: a 1/degree slice, or whole where
// replicated) with their gradients and optimizer state by formula, and what the rehearsed rank's
// step allocates above them (its activations at the whole batch, its gradients made anew, the
// gathered batch), measured. Without a rehearsal (it failed), the whole model's measured
// activations at the whole batch scaled as Megatron-LM's per-layer count (Korthikanti et al.,
// 2022: of 34 s b h bytes a layer keeps, 24 are split by the degree t, 10 are not, unless
// sequence parallelism splits them too).
MemoryPrediction tensor_parallel_memory(const AdviseProfile& profile, const CaseConditions& conditions) {
  const auto& memory = profile.memory;
  const auto& config = conditions.config;
  const int degree = conditions.devices;
  const auto* plan = find_tensor_parallel_plan(config.model);
  if (plan == nullptr) throw std::invalid_argument(config.model + " has no tensor-parallel plan");
  std::vector<torch::Tensor> held;
  for (size_t i = 0; i < memory.parameters.size(); ++i) {
    const auto& whole = memory.parameters[i];
    held.push_back(plan->shard_kind(memory.parameter_names[i]) == ShardKind::kReplicated
                       ? whole
                       : torch::empty({whole.numel() / degree}, whole.options()));
  }
  auto rank = model_states_of(held, config.optimizer);
  rank.batch = memory.inputs.at(config.batch_size) + memory.targets.at(config.batch_size);
  if (const auto found = profile.rehearsals.find(rehearsal_key(conditions)); found != profile.rehearsals.end()) {
    rank.fresh_gradients = true;
    rank.activations = found->second.step_bytes;
    return MemoryPrediction{std::vector<DeviceMemory>(static_cast<size_t>(degree), rank)};
  }
  // Activations alone (the rank's gradients count whole in its peak, an upper bound).
  const auto whole_batch = whole_model_memory(memory, config, conditions.named_batch, /*holds_batch=*/true,
                                              /*fresh_gradients=*/false);
  const double t = degree;
  const double split = sequence_parallel_on(config) ? 1.0 / t : (10.0 + 24.0 / t) / 34.0;
  rank.activations = whole_batch.activations * split;
  rank.batch = whole_batch.batch;
  return MemoryPrediction{std::vector<DeviceMemory>(static_cast<size_t>(degree), rank)};
}

StrategyPredictor tensor_parallel_predictor() {
  StrategyPredictor predictor;
  predictor.needs_gpu_per_device = true;  // the collectives run across the ranks' GPUs
  predictor.request = [](const CaseConditions& conditions, ProfileRequest& request) {
    // A halves case's step is not predicted (tensor_parallel_step_ms): only its rehearsal, for memory.
    if (!halves_on(conditions.config)) {
      for (const auto kind : kActivationCollectives) request.collectives.insert(activation_message(conditions, kind));
    }
    const int degree = conditions.devices;
    request.rehearsals[rehearsal_key(conditions)] = RehearsalRequest{
        [degree] { return std::unique_ptr<Strategy>(std::make_unique<TensorParallel>(degree)); }, conditions.config};
  };
  predictor.predict = [](const AdviseProfile& profile, const CaseConditions& conditions) {
    return Prediction{tensor_parallel_step_ms(profile, conditions), "rehearsal"};
  };
  predictor.memory = tensor_parallel_memory;
  return predictor;
}

StrategyInfo tensor_parallel_info() {
  return StrategyInfo("tensor_parallel")
      .creates<TensorParallel>()
      .summary("one process per device; every layer split across them by the model's plan (Megatron-style), the batch shared")
      .order(6)
      .distributed()
      .opt_in()
      .graph_capturable()
      .device_role("ranks")
      .option(StrategyOption::choice("sp", "sequence-parallel", {"off", "on"})
                  .help("tensor_parallel: on (LayerNorms and residuals on sequence slices, all-gather and\n"
                        "reduce-scatter in place of all-reduce) | off; default off")
                  .defaults({"off"})
                  // --batch is the global batch: each rank draws its 1/degree share, and the
                  // ranks all-gather the shares every step.
                  .apply([](RunConfig& config, const std::string&, int ranks) { config.batch_size /= ranks; }))
      .option(StrategyOption::choice("halves", "tp-halves", {"off", "on"})
                  .help("tensor_parallel: on (the batch in two halves, each on a CUDA stream of its own, their\n"
                        "collectives alternating so that one half's compute runs during the other's\n"
                        "communication) | off; default off")
                  .defaults({"off"})
                  .unnamed_value("off"))
      .obstacle(tensor_parallel_obstacle_in)
      .predictor(tensor_parallel_predictor());
}

PARBENCH_REGISTER_STRATEGY(tensor_parallel_info());

}  // namespace
}  // namespace parbench
