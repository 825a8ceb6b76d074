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
  for (size_t s = 0; s < programs.size(); ++s) {
    for (const auto& action : programs[s]) {
      if (action.op != StageOp::kBackwardAll) {
        expanded[s].push_back(action);
        continue;
      }
      for (auto m = static_cast<int64_t>(micro_batches); m-- > 0;) expanded[s].push_back({StageOp::kBackward, m});
    }
  }
  return expanded;
}

}  // namespace

SimulatedStep simulate_step(const std::vector<StageProgram>& programs, const StageDurations& durations) {
  const size_t stages = programs.size();
  if (stages == 0) throw std::invalid_argument("a simulated step needs at least one stage");
  const size_t micro_batches = durations.forward_ms.empty() ? 0 : durations.forward_ms.front().size();
  check_rows(durations.forward_ms, stages, micro_batches, "forward_ms");
  check_rows(durations.backward_ms, stages, micro_batches, "backward_ms");
  check_rows(durations.activation_copy_ms, stages - 1, micro_batches, "activation_copy_ms");
  check_rows(durations.gradient_copy_ms, stages - 1, micro_batches, "gradient_copy_ms");
  if (durations.update_ms.size() != stages) throw std::invalid_argument("update_ms: one duration per stage needed");
  const auto program = expand(programs, micro_batches);
  for (const auto& actions : program) {
    for (const auto& action : actions) {
      if (action.micro_batch < 0 || static_cast<size_t>(action.micro_batch) >= micro_batches) {
        throw std::invalid_argument("a program names micro-batch " + std::to_string(action.micro_batch) + " of " +
                                    std::to_string(micro_batches));
      }
    }
  }

  // When each input (activation) and output gradient is on its stage, and when each forward ended.
  std::vector<std::vector<double>> activation_at(stages, std::vector<double>(micro_batches, kNotYet));
  std::vector<std::vector<double>> gradient_at = activation_at, forward_end = activation_at;
  std::vector<double> compute_free(stages, 0), send_free(stages, 0);
  std::vector<size_t> next(stages, 0);
  std::vector<int64_t> in_flight(stages, 0);
  SimulatedStep result;
  result.busy_ms.assign(stages, 0);
  result.peak_micro_batches.assign(stages, 0);

  // A copy from stage `from`, one at a time on its send stream. Returns when it has arrived.
  const auto copy = [&](size_t from, double ready, double duration) {
    send_free[from] = std::max(ready, send_free[from]) + duration;
    return send_free[from];
  };

  size_t remaining = 0;
  for (const auto& actions : program) remaining += actions.size();
  while (remaining > 0) {
    bool progressed = false;
    for (size_t s = 0; s < stages; ++s) {
      while (next[s] < program[s].size()) {
        const auto& action = program[s][next[s]];
        const auto m = static_cast<size_t>(action.micro_batch);
        const bool forward = action.op == StageOp::kForward;
        double ready = 0;
        if (forward && s > 0) ready = activation_at[s][m];
        if (!forward) ready = s + 1 == stages ? forward_end[s][m] : gradient_at[s][m];
        if (std::isnan(ready)) break;  // waits for a neighbour (or, last stage, its own forward)
        const double duration = forward ? durations.forward_ms[s][m] : durations.backward_ms[s][m];
        const double end = std::max(compute_free[s], ready) + duration;
        compute_free[s] = end;
        result.busy_ms[s] += duration;
        if (forward) {
          forward_end[s][m] = end;
          result.peak_micro_batches[s] = std::max(result.peak_micro_batches[s], ++in_flight[s]);
          if (s + 1 < stages) activation_at[s + 1][m] = copy(s, end, durations.activation_copy_ms[s][m]);
        } else {
          --in_flight[s];
          if (s > 0) gradient_at[s - 1][m] = copy(s, end, durations.gradient_copy_ms[s - 1][m]);
        }
        ++next[s];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      for (size_t s = 0; s < stages; ++s) {
        if (next[s] == program[s].size()) continue;
        const auto& action = program[s][next[s]];
        throw std::logic_error("simulated pipeline deadlocks: stage " + std::to_string(s) + "'s " +
                               (action.op == StageOp::kForward ? "forward" : "backward") + " of micro-batch " +
                               std::to_string(action.micro_batch) + " waits for something no stage produces first");
      }
    }
  }

  for (size_t s = 0; s < stages; ++s) {
    result.busy_ms[s] += durations.update_ms[s];
    result.step_ms = std::max({result.step_ms, compute_free[s] + durations.update_ms[s], send_free[s]});
  }
  for (size_t s = 0; s < stages; ++s) {
    result.bubble_fraction.push_back(result.step_ms > 0 ? 1.0 - result.busy_ms[s] / result.step_ms : 0.0);
  }
  return result;
}

}  // namespace parbench
