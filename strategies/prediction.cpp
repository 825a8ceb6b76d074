#include "strategies/prediction.h"

#include "strategies/partition.h"
#include "strategies/pipeline_schedule.h"
#include "strategies/staged_options.h"
#include "strategies/training.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace parbench {

std::vector<int64_t> piece_sizes(int64_t batch, int64_t piece) {
  std::vector<int64_t> sizes;
  for (int64_t begin = 0; begin < batch; begin += piece) sizes.push_back(std::min(piece, batch - begin));
  return sizes;
}

std::vector<int64_t> shard_sizes(int64_t batch, size_t devices) {
  const auto count = static_cast<int64_t>(devices);
  return piece_sizes(batch, (batch + count - 1) / count);
}

double interpolate(const std::vector<int64_t>& sizes, const std::vector<double>& values, int64_t size) {
  const auto upper = std::lower_bound(sizes.begin(), sizes.end(), size);
  if (upper == sizes.begin()) return values.front();
  if (upper == sizes.end()) return values.back();
  const auto i = static_cast<size_t>(upper - sizes.begin());
  const double weight = static_cast<double>(size - sizes[i - 1]) / static_cast<double>(sizes[i] - sizes[i - 1]);
  return values[i - 1] + weight * (values[i] - values[i - 1]);
}

double SampledBytes::at(int64_t samples) const {
  if (sizes.empty()) return 0;
  if (sizes.size() == 1) return std::max(0.0, values.front());
  auto upper = std::lower_bound(sizes.begin(), sizes.end(), samples);
  if (upper != sizes.end() && *upper == samples) return std::max(0.0, values[static_cast<size_t>(upper - sizes.begin())]);
  // The two measured sizes around `samples`, or the nearest two where it is outside them.
  if (upper == sizes.begin()) ++upper;
  if (upper == sizes.end()) --upper;
  const auto i = static_cast<size_t>(upper - sizes.begin());
  const double slope = (values[i] - values[i - 1]) / static_cast<double>(sizes[i] - sizes[i - 1]);
  return std::max(0.0, values[i - 1] + slope * static_cast<double>(samples - sizes[i - 1]));
}

SimulatedStep simulate_cut(const CutProfile& parts, const std::vector<int64_t>& sizes, int64_t batch, int64_t split,
                           const std::string& schedule, int chunks) {
  const auto micro_batches = piece_sizes(batch, split);
  StageDurations durations;
  const auto per_micro_batch = [&](const std::vector<double>& values) {
    std::vector<double> row;
    for (auto size : micro_batches) row.push_back(interpolate(sizes, values, size));
    return row;
  };
  for (size_t p = 0; p < parts.forward_ms.size(); ++p) {
    durations.forward_ms.push_back(per_micro_batch(parts.forward_ms[p]));
    durations.backward_ms.push_back(per_micro_batch(parts.backward_ms[p]));
  }
  for (size_t p = 0; p < parts.input_gradient_ms.size(); ++p) {
    durations.input_gradient_ms.push_back(per_micro_batch(parts.input_gradient_ms[p]));
    durations.weight_gradient_ms.push_back(per_micro_batch(parts.weight_gradient_ms[p]));
  }
  for (const auto& copies : parts.copy_ms) {
    durations.activation_copy_ms.push_back(per_micro_batch(copies));
    durations.gradient_copy_ms.push_back(per_micro_batch(copies));  // the same shape, the other way
  }
  durations.update_ms = parts.update_ms;
  const auto devices = parts.forward_ms.size() / static_cast<size_t>(chunks);
  return simulate_step(make_schedule(schedule, devices, micro_batches.size(), static_cast<size_t>(chunks)), durations);
}

const std::vector<StageMemory>& MemoryProfile::stages_for(Checkpointing checkpoint) const {
  const auto found = stages.find(checkpoint);
  if (found == stages.end() || found->second.empty()) {
    throw std::invalid_argument("the stages' memory was not measured with --checkpoint=" + to_string(checkpoint));
  }
  return found->second;
}

const LossApart& MemoryProfile::loss_apart_for(Checkpointing checkpoint) const {
  const auto found = loss_apart.find(checkpoint);
  if (found == loss_apart.end() || found->second.loss.kept.sizes.empty()) {
    throw std::invalid_argument("the loss's memory was not measured with --checkpoint=" + to_string(checkpoint));
  }
  return found->second;
}

double MemoryPrediction::fullest() const {
  double most = 0;
  for (const auto& device : devices) most = std::max(most, device.peak());
  return most;
}

DeviceMemory model_states_of(const std::vector<torch::Tensor>& parameters, OptimizerKind optimizer) {
  DeviceMemory memory;
  for (const auto& parameter : parameters) {
    const double bytes = static_cast<double>(parameter.numel()) * static_cast<double>(parameter.element_size());
    memory.parameters += bytes;
    memory.gradients += bytes;
    // AdamW: exp_avg and exp_avg_sq like the parameter, and its step count, one fp32 scalar.
    if (optimizer == OptimizerKind::kAdamW) memory.optimizer_state += 2 * bytes + 4;
  }
  return memory;
}

std::vector<double> peak_activation_bytes(const std::vector<StageProgram>& programs,
                                          const std::function<double(size_t stage, int64_t micro_batch)>& kept,
                                          const std::function<double(size_t stage, int64_t micro_batch)>& transient,
                                          const std::function<double(size_t stage)>& made) {
  std::vector<double> peaks;
  for (const auto& program : programs) {
    std::map<std::pair<size_t, int64_t>, double> held_by;  // (stage, micro-batch) -> bytes
    std::set<size_t> made_by;                              // stages whose gradients exist
    double held = 0, peak = 0;
    const auto make = [&](size_t stage) {
      if (made && made_by.insert(stage).second) held += made(stage);
    };
    const auto release = [&](size_t stage, int64_t micro_batch) {
      for (auto it = held_by.begin(); it != held_by.end();) {
        if (it->first.first == stage && (micro_batch < 0 || it->first.second == micro_batch)) {
          held -= it->second;
          it = held_by.erase(it);
        } else {
          ++it;
        }
      }
    };
    for (const auto& action : program) {
      switch (action.op) {
        case StageOp::kForward: {
          const double bytes = kept(action.stage, action.micro_batch);
          held_by[{action.stage, action.micro_batch}] += bytes;
          held += bytes;
          break;
        }
        case StageOp::kBackward:
        case StageOp::kBackwardAll:
          peak = std::max(peak, held + transient(action.stage, action.micro_batch));
          release(action.stage, action.micro_batch);
          make(action.stage);
          break;
        case StageOp::kBackwardInput:  // B keeps the graph for its W
          peak = std::max(peak, held + transient(action.stage, action.micro_batch));
          break;
        case StageOp::kBackwardWeight:
          release(action.stage, action.micro_batch);
          make(action.stage);
          break;
      }
      peak = std::max(peak, held);
    }
    peaks.push_back(peak);
  }
  return peaks;
}

std::vector<int64_t> in_flight_micro_batches(const std::vector<StageProgram>& programs) {
  const auto peaks = peak_activation_bytes(
      programs, [](size_t, int64_t) { return 1.0; }, [](size_t, int64_t) { return 0.0; });
  return {peaks.begin(), peaks.end()};
}

namespace {

// The bytes of each part's parameters (a gradient is as large): made anew at its backward.
std::vector<double> part_parameter_bytes(const MemoryProfile& memory, const std::vector<std::vector<size_t>>& parts) {
  std::vector<double> bytes;
  for (const auto& part : parts) {
    double sum = 0;
    for (size_t i = 0; i < memory.parameters.size(); ++i) {
      if (std::find(part.begin(), part.end(), memory.parameter_stage[i]) != part.end()) {
        sum += static_cast<double>(memory.parameters[i].numel()) * static_cast<double>(memory.parameters[i].element_size());
      }
    }
    bytes.push_back(sum);
  }
  return bytes;
}

// The activation bytes of `parts` (each a run of stage indices) run by `programs`, each micro-batch
// m of `sizes[m]` samples (-1: the whole `batch`). Where `parts_on_other_devices`, a part also
// holds the copy of its input from the part before it; within a part, its backward runs the
// stages last first, each freeing what its forward kept. `gradients`, where given: per part, the
// gradients its first backward makes.
std::vector<double> parts_activation_bytes(const std::vector<StageMemory>& stages,
                                           const std::vector<std::vector<size_t>>& parts,
                                           const std::vector<StageProgram>& programs,
                                           const std::vector<int64_t>& sizes, int64_t batch,
                                           bool parts_on_other_devices, const std::vector<double>& gradients = {}) {
  const auto samples = [&](int64_t micro_batch) { return micro_batch < 0 ? batch : sizes.at(static_cast<size_t>(micro_batch)); };
  const auto kept = [&](size_t part, int64_t micro_batch) {
    const auto size = samples(micro_batch);
    double bytes = part > 0 && parts_on_other_devices ? stages.at(parts[part].front() - 1).output.at(size) : 0.0;
    for (auto s : parts.at(part)) bytes += stages.at(s).kept.at(size);
    return bytes;
  };
  const auto transient = [&](size_t part, int64_t micro_batch) {
    const auto size = samples(micro_batch);
    double freed = 0, most = 0;
    for (auto s = parts.at(part).rbegin(); s != parts.at(part).rend(); ++s) {
      most = std::max(most, stages.at(*s).backward.at(size) - freed);
      freed += stages.at(*s).kept.at(size);
    }
    return most;
  };
  if (gradients.empty()) return peak_activation_bytes(programs, kept, transient);
  return peak_activation_bytes(programs, kept, transient, [&](size_t part) { return gradients.at(part); });
}

}  // namespace

DeviceMemory whole_model_memory(const MemoryProfile& memory, const RunConfig& config, int64_t batch, bool holds_batch,
                                bool fresh_gradients) {
  return whole_model_memory(memory, memory.stages_for(config.checkpoint), config, batch, holds_batch, fresh_gradients);
}

DeviceMemory whole_model_memory(const MemoryProfile& memory, const std::vector<StageMemory>& stages,
                                const RunConfig& config, int64_t batch, bool holds_batch, bool fresh_gradients) {
  auto device = model_states_of(memory.parameters, config.optimizer);
  // One part per stage, so that each stage's gradients are made at its own backward.
  std::vector<std::vector<size_t>> each_stage;
  StageProgram program;
  for (size_t s = 0; s < stages.size(); ++s) {
    each_stage.push_back({s});
    program.push_back({StageOp::kForward, 0, s});
  }
  for (size_t s = stages.size(); s-- > 0;) program.push_back({StageOp::kBackward, 0, s});
  device.fresh_gradients = fresh_gradients;
  device.activations = parts_activation_bytes(stages, each_stage, {program}, {batch}, batch, /*parts_on_other_devices=*/false,
                                              fresh_gradients ? part_parameter_bytes(memory, each_stage)
                                                              : std::vector<double>{})
                           .front();
  if (holds_batch) device.batch = memory.inputs.at(batch) + memory.targets.at(batch);
  return device;
}

namespace {

// A staged case's micro-batches: split_size's (a pipeline), or none (model parallelism: the
// whole batch at once).
bool pipelined(const RunConfig& config) { return pipeline_options(config).split_size > 0; }

// Stages per device: more than one for a schedule that takes --chunks.
int chunks_of(const RunConfig& config) {
  const auto options = pipeline_options(config);
  return pipelined(config) && schedule_info(options.schedule).uses_chunks ? options.chunks : 1;
}

// Whether `schedule` splits its backwards into B and W, as its programs say. Throws
// std::invalid_argument where it cannot be built at this probe's shape.
bool splits_backwards(const std::string& schedule) {
  for (const auto& program : make_schedule(schedule, /*devices=*/2, /*micro_batches=*/2)) {
    for (const auto& action : program) {
      if (action.op == StageOp::kBackwardInput || action.op == StageOp::kBackwardWeight) return true;
    }
  }
  return false;
}

// The batch a staged case's "balanced" cut times the stages at: its micro-batch, or without one
// the whole batch (set_up_stages's measure_batch in pipeline.cpp and model_parallel.cpp).
int64_t measure_batch_of(const RunConfig& config) {
  return pipelined(config) ? std::min(pipeline_options(config).split_size, config.batch_size) : config.batch_size;
}

CutKey cut_key_of(const RunConfig& config, int devices) {
  return CutKey{static_cast<size_t>(devices) * static_cast<size_t>(chunks_of(config)), measure_batch_of(config)};
}

// The profiled cut a staged case runs: its own (ProfileRequest::cuts), else, with one chunk per
// device, the set-up's one-part-per-device cut; null where none was profiled (a cut the model
// cannot make).
const CutProfile* profiled_cut(const AdviseProfile& profile, const RunConfig& config, int devices) {
  const auto own = profile.cuts.find(cut_key_of(config, devices));
  if (own != profile.cuts.end()) return &own->second;
  if (chunks_of(config) != 1) return nullptr;
  return profile.parts.cut.empty() ? nullptr : &profile.parts;
}

// The profiled cut with its timings; throws where none was profiled.
const CutProfile& cut_of(const AdviseProfile& profile, const RunConfig& config, int devices) {
  const auto* parts = profiled_cut(profile, config, devices);
  if (parts == nullptr || parts->forward_ms.empty()) {
    throw std::invalid_argument("its cut into " + std::to_string(devices * chunks_of(config)) +
                                " parts was not profiled (the model cannot make it)");
  }
  return *parts;
}

SimulatedStep simulate_staged(const AdviseProfile& profile, const CaseConditions& conditions) {
  const auto& config = conditions.config;
  const auto& parts = cut_of(profile, config, conditions.devices);
  const auto batch = config.batch_size;
  const auto& sizes = parts.sizes.empty() ? profile.sizes : parts.sizes;
  if (!pipelined(config)) return simulate_cut(parts, sizes, batch, batch, "gpipe", 1);
  const auto options = pipeline_options(config);
  return simulate_cut(parts, sizes, batch, options.split_size, options.schedule, chunks_of(config));
}

// The stage indices of each part of a staged case's cut: the cut its time was predicted from,
// else its --cut, else (the time profile failed: a model too large for one device) the cut that
// balances the parts' parameter bytes.
std::vector<std::vector<size_t>> staged_parts(const AdviseProfile& profile, const RunConfig& config, size_t parts) {
  const auto& memory = profile.memory;
  std::string spec;
  // Its cut, where one was profiled; else the case's own cut, below.
  if (const auto* profiled = profiled_cut(profile, config, static_cast<int>(parts) / chunks_of(config))) {
    spec = profiled->cut;
  }
  if (const auto own = staged_options(config).cut; spec.empty() && own != "balanced") spec = own;
  Cut cut;
  if (!spec.empty()) {
    cut = parse_cut(spec, memory.stage_names, parts, memory.stage_groups);
  } else {
    std::vector<double> stage_parameters(memory.stage_names.size(), 0.0);
    for (size_t i = 0; i < memory.parameters.size(); ++i) {
      stage_parameters[memory.parameter_stage[i]] += static_cast<double>(memory.parameters[i].numel());
    }
    cut = balanced_cut(memory.stage_names, stage_parameters, parts);
  }
  std::vector<std::vector<size_t>> indices;
  for (const auto& part : cut) {
    indices.emplace_back();
    for (const auto& name : part) {
      const auto found = std::find(memory.stage_names.begin(), memory.stage_names.end(), name);
      indices.back().push_back(static_cast<size_t>(found - memory.stage_names.begin()));
    }
  }
  return indices;
}

// The measured stages as a staged case runs them: the last holds its output (a language model's
// logits) from its forward to its backward, and takes its loss only then (stage_executor's
// micro_loss; the tutorial's over every output), on top of what it holds.
std::vector<StageMemory> staged_stages(const MemoryProfile& memory, Checkpointing checkpoint) {
  auto stages = memory.stages_for(checkpoint);
  const auto& apart = memory.loss_apart_for(checkpoint);
  auto& last = stages.back();
  if (last.backward.sizes != apart.loss.kept.sizes) {
    throw std::invalid_argument("the last stage and its loss were measured at different sizes");
  }
  last.kept = apart.last_stage.kept;
  for (size_t i = 0; i < last.backward.values.size(); ++i) last.backward.values[i] += apart.loss.kept.values[i];
  return stages;
}

// Stages on devices: each device's stages' model states (one optimizer per stage), the
// activations its schedule's program holds, and the batch's inputs on the first device and
// targets on the last stage's.
MemoryPrediction staged_memory(const AdviseProfile& profile, const CaseConditions& conditions) {
  const auto& config = conditions.config;
  const auto& memory = profile.memory;
  const auto stages = staged_stages(memory, config.checkpoint);
  const int chunks = chunks_of(config);
  const auto devices = static_cast<size_t>(conditions.devices);
  const auto parts = staged_parts(profile, config, devices * static_cast<size_t>(chunks));
  const auto batch = config.batch_size;
  const auto options = pipeline_options(config);
  const auto sizes = pipelined(config) ? piece_sizes(batch, options.split_size) : std::vector<int64_t>{batch};
  const auto programs = pipelined(config) ? make_schedule(options.schedule, devices, sizes.size(), static_cast<size_t>(chunks))
                                          : make_schedule("gpipe", devices, 1);
  // The stage executor sets every gradient to none before a step.
  const auto activations = parts_activation_bytes(stages, parts, programs, sizes, batch, /*parts_on_other_devices=*/true,
                                                  part_parameter_bytes(memory, parts));
  MemoryPrediction prediction;
  for (size_t d = 0; d < devices; ++d) {
    std::vector<torch::Tensor> held;
    for (size_t p = d; p < parts.size(); p += devices) {
      for (size_t i = 0; i < memory.parameters.size(); ++i) {
        const auto& part = parts[p];
        if (std::find(part.begin(), part.end(), memory.parameter_stage[i]) != part.end()) {
          held.push_back(memory.parameters[i]);
        }
      }
    }
    auto device = model_states_of(held, config.optimizer);
    device.activations = activations[d];
    device.fresh_gradients = true;
    if (d == 0) device.batch += memory.inputs.at(batch);
    if (d == (parts.size() - 1) % devices) device.batch += memory.targets.at(batch);
    prediction.devices.push_back(device);
  }
  return prediction;
}

}  // namespace

StrategyPredictor staged_predictor(std::function<bool(const CaseConditions&)> covers) {
  StrategyPredictor predictor;
  predictor.covers = std::move(covers);
  predictor.request = [](const CaseConditions& conditions, ProfileRequest& request) {
    const auto& config = conditions.config;
    const auto options = pipeline_options(config);
    const int chunks = chunks_of(config);
    if (pipelined(config)) {
      // The schedule, built where the simulator will replay it: a case it cannot be built for is
      // reported before anything is profiled.
      make_schedule(options.schedule, static_cast<size_t>(conditions.devices),
                    static_cast<size_t>(micro_batch_count(config.batch_size, options.split_size)),
                    static_cast<size_t>(chunks));
      request.backward_halves |= splits_backwards(options.schedule);
    }
    const auto micro_batches = pipelined(config) ? piece_sizes(config.batch_size, options.split_size)
                                                 : std::vector<int64_t>{config.batch_size};
    request.cuts[cut_key_of(config, conditions.devices)].insert(micro_batches.begin(), micro_batches.end());
    request.sizes.insert(micro_batches.begin(), micro_batches.end());
  };
  predictor.predict = [](const AdviseProfile& profile, const CaseConditions& conditions) {
    return Prediction{simulate_staged(profile, conditions).step_ms,
                      cut_of(profile, conditions.config, conditions.devices).cut};
  };
  predictor.simulate = simulate_staged;
  predictor.memory = staged_memory;
  return predictor;
}

StrategyPredictor rank_predictor(
    std::function<std::pair<double, int64_t>(const CaseConditions&)> profiled_at,
    std::function<Prediction(const AdviseProfile&, const CaseConditions&, const RankProfile&)> predict) {
  StrategyPredictor predictor;
  predictor.needs_gpu_per_device = true;
  predictor.request = [profiled_at](const CaseConditions& conditions, ProfileRequest& request) {
    const auto [bucket_mib, batch] = profiled_at(conditions);
    request.add_rank(bucket_mib, batch);
  };
  predictor.predict = [profiled_at, predict](const AdviseProfile& profile, const CaseConditions& conditions) {
    return predict(profile, conditions, profile.ranks.at(profiled_at(conditions)));
  };
  return predictor;
}

}  // namespace parbench
