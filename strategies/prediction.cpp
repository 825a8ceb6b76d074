#include "strategies/prediction.h"

#include "strategies/pipeline_schedule.h"
#include "strategies/staged_options.h"

#include <algorithm>
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

// The profiled cut a staged case runs: its own (ProfileRequest::cuts), else the set-up's one-chunk
// or chunked cut; throws where none was profiled (a cut the model cannot make).
const CutProfile& cut_of(const AdviseProfile& profile, const RunConfig& config, int devices) {
  const auto own = profile.cuts.find(cut_key_of(config, devices));
  if (own != profile.cuts.end()) return own->second;
  const int chunks = chunks_of(config);
  if (chunks == 1) {
    if (profile.parts.forward_ms.empty()) {
      throw std::invalid_argument("its cut into " + std::to_string(devices) +
                                  " parts was not profiled (the model cannot make it)");
    }
    return profile.parts;
  }
  const auto found = profile.chunked.find(chunks);
  if (found == profile.chunked.end()) {
    throw std::invalid_argument("its cut of " + std::to_string(chunks) +
                                " chunks per device was not profiled (the model cannot make it)");
  }
  return found->second;
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
