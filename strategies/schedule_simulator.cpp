#include "strategies/schedule_simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace parbench {
namespace {

constexpr double kNotYet = std::numeric_limits<double>::quiet_NaN();

void check_rows(const std::vector<std::vector<double>>& rows, size_t count, size_t micro_batches, const char* what) {
  if (rows.size() != count) {
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(rows.size()) + " rows for " +
                                std::to_string(count) + " needed");
  }
  for (const auto& row : rows) {
    if (row.size() != micro_batches) {
      throw std::invalid_argument(std::string(what) + ": a row of " + std::to_string(row.size()) +
                                  " durations for " + std::to_string(micro_batches) + " micro-batches");
    }
  }
}

// The programs with the tutorial's kBackwardAll spelled out as backwards, last micro-batch first.
std::vector<StageProgram> expand(const std::vector<StageProgram>& programs, size_t micro_batches) {
  std::vector<StageProgram> expanded(programs.size());
  for (size_t d = 0; d < programs.size(); ++d) {
    for (const auto& action : programs[d]) {
      if (action.op != StageOp::kBackwardAll) {
        expanded[d].push_back(action);
        continue;
      }
      for (auto m = static_cast<int64_t>(micro_batches); m-- > 0;) {
        expanded[d].push_back({StageOp::kBackward, m, action.stage});
      }
    }
  }
  return expanded;
}

double duration_of(const StageDurations& durations, const StageAction& action) {
  const size_t s = action.stage;
  const auto m = static_cast<size_t>(action.micro_batch);
  switch (action.op) {
    case StageOp::kForward: return durations.forward_ms[s][m];
    case StageOp::kBackward: return durations.backward_ms[s][m];
    case StageOp::kBackwardInput: return durations.input_gradient_ms[s][m];
    case StageOp::kBackwardWeight: return durations.weight_gradient_ms[s][m];
    case StageOp::kBackwardAll: break;  // expand() has spelled it out
  }
  throw std::logic_error("the simulator has no duration for this action");
}

}  // namespace

SimulatedStep simulate_step(const std::vector<StageProgram>& programs, const StageDurations& durations) {
  const size_t devices = programs.size();
  const size_t stages = durations.forward_ms.size();
  if (devices == 0 || stages == 0) throw std::invalid_argument("a simulated step needs at least one stage");
  const size_t micro_batches = durations.forward_ms.front().size();
  check_rows(durations.forward_ms, stages, micro_batches, "forward_ms");
  check_rows(durations.backward_ms, stages, micro_batches, "backward_ms");
  check_rows(durations.activation_copy_ms, stages - 1, micro_batches, "activation_copy_ms");
  check_rows(durations.gradient_copy_ms, stages - 1, micro_batches, "gradient_copy_ms");
  if (durations.update_ms.size() != stages) throw std::invalid_argument("update_ms: one duration per stage needed");
  const auto program = expand(programs, micro_batches);
  const bool split_backwards = std::any_of(program.begin(), program.end(), [](const StageProgram& actions) {
    return std::any_of(actions.begin(), actions.end(), [](const StageAction& action) {
      return action.op == StageOp::kBackwardInput || action.op == StageOp::kBackwardWeight;
    });
  });
  if (split_backwards) {
    check_rows(durations.input_gradient_ms, stages, micro_batches, "input_gradient_ms");
    check_rows(durations.weight_gradient_ms, stages, micro_batches, "weight_gradient_ms");
  }
  // Each stage's device: the one program that holds its actions.
  std::vector<size_t> device_of(stages, devices);
  for (size_t d = 0; d < devices; ++d) {
    for (const auto& action : program[d]) {
      if (action.stage >= stages || action.micro_batch < 0 || static_cast<size_t>(action.micro_batch) >= micro_batches) {
        throw std::invalid_argument("a program names stage " + std::to_string(action.stage) + ", micro-batch " +
                                    std::to_string(action.micro_batch) + " of " + std::to_string(stages) +
                                    " stages and " + std::to_string(micro_batches) + " micro-batches");
      }
      if (device_of[action.stage] != devices && device_of[action.stage] != d) {
        throw std::invalid_argument("stage " + std::to_string(action.stage) + " appears in two devices' programs");
      }
      device_of[action.stage] = d;
    }
  }

  // When each input (activation) and output gradient is on its stage, and when each forward ended.
  std::vector<std::vector<double>> activation_at(stages, std::vector<double>(micro_batches, kNotYet));
  std::vector<std::vector<double>> gradient_at = activation_at, forward_end = activation_at;
  std::vector<double> compute_free(devices, 0), send_free(stages, 0);
  std::vector<size_t> next(devices, 0);
  std::vector<int64_t> in_flight(devices, 0);
  SimulatedStep result;
  result.busy_ms.assign(devices, 0);
  result.peak_micro_batches.assign(devices, 0);

  // A copy from stage `from`, one at a time on its send stream. Returns when it has arrived.
  const auto copy = [&](size_t from, double ready, double duration) {
    send_free[from] = std::max(ready, send_free[from]) + duration;
    return send_free[from];
  };

  size_t remaining = 0;
  for (const auto& actions : program) remaining += actions.size();
  while (remaining > 0) {
    bool progressed = false;
    for (size_t d = 0; d < devices; ++d) {
      while (next[d] < program[d].size()) {
        const auto& action = program[d][next[d]];
        const size_t s = action.stage;
        const auto m = static_cast<size_t>(action.micro_batch);
        const bool forward = action.op == StageOp::kForward;
        const bool weights_only = action.op == StageOp::kBackwardWeight;
        double ready = 0;
        if (forward && s > 0) ready = activation_at[s][m];
        if (!forward && !weights_only) ready = s + 1 == stages ? forward_end[s][m] : gradient_at[s][m];
        if (std::isnan(ready)) break;  // waits for a neighbour (or, last stage, its own forward)
        const double duration = duration_of(durations, action);
        const double start = std::max(compute_free[d], ready);
        const double end = start + duration;
        compute_free[d] = end;
        result.actions.push_back({d, action, start, end});
        result.busy_ms[d] += duration;
        if (forward) {
          forward_end[s][m] = end;
          result.peak_micro_batches[d] = std::max(result.peak_micro_batches[d], ++in_flight[d]);
          if (s + 1 < stages) activation_at[s + 1][m] = copy(s, end, durations.activation_copy_ms[s][m]);
        } else {
          if (action.op != StageOp::kBackwardInput) --in_flight[d];  // B keeps the activations for W
          if (!weights_only && s > 0) gradient_at[s - 1][m] = copy(s, end, durations.gradient_copy_ms[s - 1][m]);
        }
        ++next[d];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      for (size_t d = 0; d < devices; ++d) {
        if (next[d] == program[d].size()) continue;
        const auto& action = program[d][next[d]];
        throw std::logic_error("simulated pipeline deadlocks: stage " + std::to_string(action.stage) + "'s " +
                               (action.op == StageOp::kForward ? "forward" : "backward") + " of micro-batch " +
                               std::to_string(action.micro_batch) + " waits for something no stage produces first");
      }
    }
  }

  // Each device's updates follow its last action.
  for (size_t s = 0; s < stages; ++s) {
    if (device_of[s] == devices) throw std::invalid_argument("stage " + std::to_string(s) + " is in no program");
    compute_free[device_of[s]] += durations.update_ms[s];
    result.busy_ms[device_of[s]] += durations.update_ms[s];
  }
  for (size_t d = 0; d < devices; ++d) result.step_ms = std::max(result.step_ms, compute_free[d]);
  for (size_t s = 0; s < stages; ++s) result.step_ms = std::max(result.step_ms, send_free[s]);
  for (size_t d = 0; d < devices; ++d) {
    result.bubble_fraction.push_back(result.step_ms > 0 ? 1.0 - result.busy_ms[d] / result.step_ms : 0.0);
  }
  return result;
}

std::string format_schedule_grid(const std::string& schedule, size_t devices, size_t micro_batches, size_t chunks) {
  const auto programs = make_schedule(schedule, devices, micro_batches, chunks);
  const size_t stages = devices * chunks;
  StageDurations unit;
  const std::vector<double> ones(micro_batches, 1.0), zeros(micro_batches, 0.0);
  unit.forward_ms = unit.backward_ms = unit.input_gradient_ms = unit.weight_gradient_ms = {stages, ones};
  unit.activation_copy_ms = unit.gradient_copy_ms = {stages - 1, zeros};
  unit.update_ms.assign(stages, 0.0);
  const auto step = simulate_step(programs, unit);

  const auto slots = static_cast<size_t>(std::lround(step.step_ms));
  std::vector<std::vector<std::string>> grid(devices, std::vector<std::string>(slots, "."));
  size_t width = 1;
  for (const auto& placed : step.actions) {
    const auto op = placed.action.op;
    auto cell = std::string(op == StageOp::kForward ? "F" : op == StageOp::kBackwardWeight ? "W" : "B") +
                std::to_string(placed.action.micro_batch);
    if (chunks > 1) cell += "s" + std::to_string(placed.action.stage);
    width = std::max(width, cell.size());
    grid[placed.device][static_cast<size_t>(std::lround(placed.start_ms))] = cell;
  }
  std::string text = schedule + ": " + std::to_string(devices) + " devices, " + std::to_string(micro_batches) +
                     " micro-batches" + (chunks > 1 ? ", " + std::to_string(chunks) + " chunks per device" : "") +
                     "; one slot per forward (F), backward (B) or weight gradient (W), copies free\n";
  for (size_t d = 0; d < devices; ++d) {
    text += "device " + std::to_string(d) + ":";
    for (const auto& cell : grid[d]) text += " " + cell + std::string(width - cell.size(), ' ');
    while (!text.empty() && text.back() == ' ') text.pop_back();
    text += "\n";
  }
  return text;
}

double exposed_allreduce_ms(const std::vector<double>& bucket_ready_ms, const std::vector<double>& allreduce_ms,
                            double backward_ms, bool overlap) {
  if (bucket_ready_ms.size() != allreduce_ms.size()) {
    throw std::invalid_argument("exposed_allreduce_ms: " + std::to_string(bucket_ready_ms.size()) + " ready times for " +
                                std::to_string(allreduce_ms.size()) + " all-reduces");
  }
  double communication_free = 0;
  for (size_t bucket = 0; bucket < allreduce_ms.size(); ++bucket) {
    const double start = std::max(communication_free, overlap ? bucket_ready_ms[bucket] : backward_ms);
    communication_free = start + allreduce_ms[bucket];
  }
  return std::max(0.0, communication_free - backward_ms);
}

}  // namespace parbench
