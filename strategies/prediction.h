// How --advise predicts a strategy's step: what its profile measured, what a case asks to have
// profiled, and the shared pieces of the strategies' predictors (StrategyPredictor, declared by
// each strategy in its own file). benchmarks/advise/advise.h profiles, calls the predictors and ranks;
// docs/METRICS.md ("Predicted step time") has the models.
#pragma once

#include "strategies/ddp_options.h"
#include "strategies/partition.h"
#include "strategies/schedule_simulator.h"
#include "strategies/strategy.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace parbench {

// One process per device: a rank's step and its gradient buckets' all-reduces, for one bucket
// size and per-rank batch, in milliseconds.
struct RankProfile {
  double rank_step_ms = 0;  // the whole model's step at the per-rank batch
  double backward_ms = 0;   // the model's backward there, the loss's included
  std::vector<double> bucket_ready_ms;      // per bucket, in starting order: when its gradients are ready, from backward's start
  std::vector<double> bucket_allreduce_ms;  // per bucket: its all-reduce across the ranks' GPUs
  // Step time lost per millisecond of communication run beside the step (NCCL's kernels share
  // the GPU's SMs and memory with the step's): an all-reduce of all the gradients beside the
  // reference step, less the longer of the two alone, over the all-reduce alone. 0: not measured.
  double step_lost_per_comm_ms = 0;
};

// A collective across the profile's GPUs, of one tensor whose whole is `bytes` of `dtype`: an
// all-reduce's buffer, an all-gather's output, a reduce-scatter's input. What a predictor asks to
// have timed (ProfileRequest::collectives).
enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter };
struct CollectiveMessage {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  int64_t bytes = 0;
  c10::ScalarType dtype = c10::ScalarType::Float;
  bool operator<(const CollectiveMessage& other) const {
    return std::tie(kind, bytes, dtype) < std::tie(other.kind, other.bytes, other.dtype);
  }
  bool operator==(const CollectiveMessage& other) const {
    return kind == other.kind && bytes == other.bytes && dtype == other.dtype;
  }
};

inline std::string to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all-reduce";
    case CollectiveKind::kAllGather: return "all-gather";
    case CollectiveKind::kReduceScatter: return "reduce-scatter";
  }
  return "collective";
}

// One rank of a strategy whose ranks each run their own slice of the model (tensor_parallel),
// rehearsed alone on one device: its own compute and memory, its collectives sent nowhere
// (strategies/distributed/rehearsal_backend.h) but tallied in its counters.
struct Rehearsal {
  double step_ms = 0;     // its step, timed as the case runs it (eager, or replayed from a CUDA graph)
  double step_bytes = 0;  // the most its eager step allocates above what was allocated before it
  std::map<std::string, double> counters;  // the rank's counters() after its last step
};

// What a case asks to have rehearsed (ProfileRequest::rehearsals).
struct RehearsalRequest {
  std::function<std::unique_ptr<Strategy>()> create;  // the rank, set up on one device
  RunConfig config;                                   // as the case's rank runs: its own batch
  // Read only with the set-up's time profile (zero's: its prediction needs the rank profile too):
  // not rehearsed where that was skipped or failed.
  bool time_only = false;
};

// What `hidden_comm_ms` of collectives hidden behind the step still cost it (RankProfile).
inline double hidden_comm_cost_ms(const RankProfile& rank, double hidden_comm_ms) {
  return rank.step_lost_per_comm_ms * (hidden_comm_ms > 0 ? hidden_comm_ms : 0.0);
}

// One cut's pieces, in milliseconds: per part and per profiled micro-batch size (the profile's
// `sizes`), forward, backward (the loss included on the last part), and the copy of the part's
// output to the next part's device; per part, its SGD update.
struct CutProfile {
  std::string cut;  // format_cut's; empty where the cut was not profiled
  std::vector<int64_t> sizes;  // the sizes its pieces were timed at (empty: the profile's `sizes`)
  std::vector<std::vector<double>> forward_ms, backward_ms, copy_ms;
  // The halves of each backward, as the executor runs a schedule that splits them (zb-h1): B,
  // the input gradient (with the loss on the last part; nothing on the first, which has no input
  // gradient), and W, the weight gradients through the graph B kept. Empty unless asked for.
  std::vector<std::vector<double>> input_gradient_ms, weight_gradient_ms;
  std::vector<double> update_ms;
};

// The cut a staged case runs, as it chooses it (choose_cut): how many parts (devices x chunks),
// and the batch a "balanced" cut times the stages at (the micro-batch; the batch without one).
struct CutKey {
  size_t parts = 0;
  int64_t measure_batch = 0;
  bool operator<(const CutKey& other) const {
    return std::tie(parts, measure_batch) < std::tie(other.parts, other.measure_batch);
  }
};

// Bytes measured at a few micro-batch sizes (advise_memory measures each stage at the sizes its
// set-up's cases run, and at two small ones): exact at a measured size, linear between two, and
// beyond the largest (or below the smallest) along the line through the nearest two. Memory is
// not linear in the batch (cuDNN's workspaces, the allocator's rounding), so a fit through two
// small sizes alone drifts at a case's own size.
struct SampledBytes {
  std::vector<int64_t> sizes;  // ascending
  std::vector<double> values;  // at each of sizes
  double at(int64_t samples) const;
};

// One model stage's activation memory on its device, as a case runs it (checkpointed or not).
struct StageMemory {
  SampledBytes kept;      // allocated by its forward (the last stage's loss included) and held until its backward
  SampledBytes output;    // its output, which a stage on another device receives as a copy
  SampledBytes backward;  // the most its backward allocates above `kept`, the incoming gradient included
};

// The last stage apart from its loss, and the loss alone (taken over outputs gathered into one
// tensor, as data_parallel takes it on device 0 over every replica's output).
struct LossApart {
  StageMemory last_stage;  // as a stage that is not last: its output kept, its gradient given
  StageMemory loss;        // kept: what the loss holds for its backward; backward: its transient, the outputs' gradient included
};

// What --advise's memory prediction reads (benchmarks/advise/advise_memory.h measures it; docs/METRICS.md,
// "Predicted peak memory"): the model's parameters without their memory, and each stage's
// activations measured one stage at a time.
struct MemoryProfile {
  std::vector<torch::Tensor> parameters;  // in the model's order, on the meta device: shapes and dtypes only
  std::vector<std::string> parameter_names;
  std::vector<size_t> parameter_stage;    // per parameter: the stage that holds it
  std::vector<std::string> stage_names;
  std::vector<StageGroup> stage_groups;
  std::map<Checkpointing, std::vector<StageMemory>> stages;  // per checkpointing choice measured
  std::map<Checkpointing, LossApart> loss_apart;             // the same choices'
  SampledBytes inputs, targets;  // a batch's
  double device_bytes = 0;      // each device's capacity; 0 where unknown (CPU stand-ins): nothing is flagged
  // The stages measured under `checkpoint`; throws std::invalid_argument where they were not.
  const std::vector<StageMemory>& stages_for(Checkpointing checkpoint) const;
  const LossApart& loss_apart_for(Checkpointing checkpoint) const;  // the same
};

// One device's predicted memory, in bytes.
struct DeviceMemory {
  double parameters = 0, gradients = 0, optimizer_state = 0;
  // The strategy's own memory at the step's peak beyond its model states (ddp's gradient buckets,
  // zero's whole gradients or gathered units).
  double strategy = 0;
  double batch = 0;        // the batch's inputs and targets held on the device
  double activations = 0;  // the most held at once by the schedule, the backward's transient included
  // The step makes its gradients anew (they are set to none before it): `activations` then counts
  // each stage's gradients from its backward on, and the peak does not add `gradients` again.
  bool fresh_gradients = false;
  double model_states() const { return parameters + gradients + optimizer_state; }
  double peak() const {
    return parameters + optimizer_state + (fresh_gradients ? 0 : gradients) + strategy + batch + activations;
  }
};

struct MemoryPrediction {
  std::vector<DeviceMemory> devices;  // in the case's devices' (ranks') order
  double fullest() const;             // the highest peak
};

// What one set-up's profile measured, in milliseconds.
struct AdviseProfile {
  double single_step_ms = 0;  // the reference: the whole model's step on one device
  std::vector<int64_t> sizes;  // the micro-batch sizes the set-up's cuts were profiled at
  CutProfile parts;            // one part per device, cut at the whole batch
  std::map<CutKey, CutProfile> cuts;  // each staged case's own cut (ProfileRequest::cuts)
  // The counters() of a strategy set up once on the profile's devices (ProfileRequest::set_up).
  std::map<std::string, double> set_up_counters;
  std::map<std::pair<double, int64_t>, RankProfile> ranks;  // by (bucket MiB, per-rank batch)
  bool graphed = false;  // every piece captured in a CUDA graph and replayed
  MemoryProfile memory;  // for the memory predictions (StrategyPredictor::memory)
  std::map<std::string, Rehearsal> rehearsals;  // by the key the case asked with (ProfileRequest::rehearsals)
  std::map<CollectiveMessage, double> collective_ms;  // ProfileRequest::collectives', timed
};

// What a set-up's cases need profiled beyond the reference step; each case's predictor adds its
// own needs (StrategyPredictor::request).
struct ProfileRequest {
  bool parts = false;            // the one-chunk cut's parts, at the whole batch
  bool backward_halves = false;  // and their backwards' halves
  std::map<CutKey, std::set<int64_t>> cuts;  // the cuts the staged cases run, with their micro-batch sizes
  std::set<int64_t> sizes;       // micro-batch sizes the cases run, profiled beside the set-up's own
  // A strategy to set up once on the profile's devices with this config (the set-up's whole
  // batch), its counters() kept in AdviseProfile::set_up_counters: what it measures at set-up.
  const StrategyInfo* set_up = nullptr;
  RunConfig set_up_config;
  std::vector<std::pair<double, int64_t>> ranks;  // (bucket MiB, per-rank batch): RankProfile's
  // Ranks to rehearse, by a key their predictor names them by; each rehearsed once, on its own
  // (a rehearsal that fails leaves its key out, and the rest of the profile stands).
  std::map<std::string, RehearsalRequest> rehearsals;
  // Collectives across the profile's GPUs, each timed once, on its own.
  std::set<CollectiveMessage> collectives;

  // Asks for a rank's profile at this bucket size and per-rank batch, once.
  void add_rank(double bucket_mib, int64_t batch) {
    const std::pair<double, int64_t> ranked{bucket_mib, batch};
    if (std::find(ranks.begin(), ranks.end(), ranked) == ranks.end()) ranks.push_back(ranked);
  }
};

// One case's predicted step.
struct Prediction {
  double step_ms = 0;
  std::string profile;  // the cut it was predicted from ("" : the whole model alone)
};

// The sizes of `batch` samples cut into pieces of `piece` (the last may be smaller), as
// torch::split cuts them.
std::vector<int64_t> piece_sizes(int64_t batch, int64_t piece);

// How `batch` samples scatter over `devices` replicas: torch::chunk's sizes.
std::vector<int64_t> shard_sizes(int64_t batch, size_t devices);

// `values` (one per profiled size) at `size`, linearly between the neighbouring sizes.
double interpolate(const std::vector<int64_t>& sizes, const std::vector<double>& values, int64_t size);

// The schedule simulator's step of `schedule` over the profiled cut `parts` (`chunks` parts per
// device), `batch` samples in micro-batches of `split`, each piece's time interpolated between
// the profiled `sizes`. Throws std::invalid_argument where the schedule cannot be built there.
SimulatedStep simulate_cut(const CutProfile& parts, const std::vector<int64_t>& sizes, int64_t batch, int64_t split,
                           const std::string& schedule, int chunks);

// Stages on devices (model_parallel, pipeline): the schedule simulator over the case's profiled
// cut, one micro-batch of the whole batch where the case has no split_size. `covers`: which of
// the strategy's cases it predicts (unset: every case).
StrategyPredictor staged_predictor(std::function<bool(const CaseConditions&)> covers = nullptr);

// One process per device (ddp, zero, tensor_parallel): each case asks for a rank's profile at the
// (bucket MiB, per-rank batch) `profiled_at` gives it, and `predict` prices the case from it.
StrategyPredictor rank_predictor(
    std::function<std::pair<double, int64_t>(const CaseConditions&)> profiled_at,
    std::function<Prediction(const AdviseProfile&, const CaseConditions&, const RankProfile&)> predict);

// ---- Predicted memory (docs/METRICS.md, "Predicted peak memory") ----------------------------

// The model states of `parameters` (their shapes and dtypes): the parameters, gradients of the
// same dtype, and AdamW's exp_avg and exp_avg_sq beside each plus an fp32 step count per tensor
// (SGD: none). Each entry of `parameters` is one tensor the optimizer steps.
DeviceMemory model_states_of(const std::vector<torch::Tensor>& parameters, OptimizerKind optimizer);

// Per program (device): the most activation bytes held at once as it runs its actions in order.
// A forward of (stage, micro-batch) adds `kept(stage, micro_batch)` until its backward (zb-h1: its
// W; the tutorial's last stage: its backward over every micro-batch), and a backward peaks
// `transient(stage, micro_batch)` (micro_batch -1: every one) above what is held. Where given,
// `made(stage)` is added for the rest of the step at the stage's first backward (its weights'
// gradients, made anew each step).
std::vector<double> peak_activation_bytes(const std::vector<StageProgram>& programs,
                                          const std::function<double(size_t stage, int64_t micro_batch)>& kept,
                                          const std::function<double(size_t stage, int64_t micro_batch)>& transient,
                                          const std::function<double(size_t stage)>& made = nullptr);

// Per program: the most micro-batches whose forward has run and backward (W) has not, counted per
// stage (peak_activation_bytes with one byte each).
std::vector<int64_t> in_flight_micro_batches(const std::vector<StageProgram>& programs);

// The whole model on one device at `batch` samples (single, a ddp or zero rank, a data_parallel
// replica): its model states under `optimizer`, its activations (forwards of every stage, then
// backwards last first; with `fresh_gradients`, each stage's gradients made at its backward) and,
// where `holds_batch`, the batch.
DeviceMemory whole_model_memory(const MemoryProfile& memory, const RunConfig& config, int64_t batch,
                                bool holds_batch = true, bool fresh_gradients = true);
// The same over `stages` in place of the measured ones (data_parallel's replicas: the last
// without its loss).
DeviceMemory whole_model_memory(const MemoryProfile& memory, const std::vector<StageMemory>& stages,
                                const RunConfig& config, int64_t batch, bool holds_batch, bool fresh_gradients);

// ddp's and zero's rank profile: at the case's gradient bucket size and per-rank batch.
inline std::pair<double, int64_t> at_bucket_and_batch(const CaseConditions& conditions) {
  return {ddp_options(conditions.config).bucket_mib, conditions.config.batch_size};
}

}  // namespace parbench
