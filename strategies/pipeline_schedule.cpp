#include "strategies/pipeline_schedule.h"

#include "core/text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <stdexcept>

namespace parbench {
namespace {

std::vector<StageProgram> interleaved_1f1b(size_t devices, size_t micro_batches, size_t chunks) {
  if (micro_batches % devices != 0) {
    throw std::invalid_argument("interleaved-1f1b needs a number of micro-batches that is a multiple of the " +
                                std::to_string(devices) + " devices, got " + std::to_string(micro_batches));
  }
  const auto d_count = static_cast<int64_t>(devices), v_count = static_cast<int64_t>(chunks);
  const int64_t total = static_cast<int64_t>(micro_batches) * v_count;
  std::vector<StageProgram> programs(devices);
  for (int64_t d = 0; d < d_count; ++d) {
    auto& program = programs[static_cast<size_t>(d)];
    // The k-th forward or backward of device d: its micro-batch and the stage of its chunk.
    const auto action = [&](StageOp op, int64_t k) {
      const int64_t group = k / (d_count * v_count), position = k % (d_count * v_count);
      const int64_t chunk = op == StageOp::kForward ? position / d_count : v_count - 1 - position / d_count;
      return StageAction{op, group * d_count + position % d_count, static_cast<size_t>(chunk * d_count + d)};
    };
    const int64_t warmup = std::min((d_count - 1 - d) * 2 + (v_count - 1) * d_count, total);
    for (int64_t k = 0; k < warmup; ++k) program.push_back(action(StageOp::kForward, k));
    for (int64_t k = 0; k < total - warmup; ++k) {
      program.push_back(action(StageOp::kForward, warmup + k));
      program.push_back(action(StageOp::kBackward, k));
    }
    for (int64_t k = total - warmup; k < total; ++k) program.push_back(action(StageOp::kBackward, k));
  }
  return programs;
}

// One program per stage (one stage per device) from `each_stage(s, stages, micro_batches, program)`.
template <typename EachStage>
std::vector<StageProgram> per_stage(size_t devices, size_t micro_batches, EachStage each_stage) {
  std::vector<StageProgram> programs(devices);
  for (size_t s = 0; s < devices; ++s) each_stage(s, devices, static_cast<int64_t>(micro_batches), programs[s]);
  return programs;
}

void forwards(StageProgram& program, size_t s, int64_t begin, int64_t end) {
  for (int64_t m = begin; m < end; ++m) program.push_back({StageOp::kForward, m, s});
}

void backwards_last_first(StageProgram& program, size_t s, int64_t micro_batches) {
  for (int64_t m = micro_batches; m-- > 0;) program.push_back({StageOp::kBackward, m, s});
}

std::vector<StageProgram> tutorial(size_t devices, size_t micro_batches, size_t) {
  return per_stage(devices, micro_batches, [](size_t s, size_t stages, int64_t m_count, StageProgram& program) {
    forwards(program, s, 0, m_count);
    if (s + 1 == stages) {
      program.push_back({StageOp::kBackwardAll, -1, s});
    } else {
      backwards_last_first(program, s, m_count);
    }
  });
}

std::vector<StageProgram> gpipe(size_t devices, size_t micro_batches, size_t) {
  return per_stage(devices, micro_batches, [](size_t s, size_t, int64_t m_count, StageProgram& program) {
    forwards(program, s, 0, m_count);
    backwards_last_first(program, s, m_count);
  });
}

std::vector<StageProgram> one_f_one_b(size_t devices, size_t micro_batches, size_t) {
  return per_stage(devices, micro_batches, [](size_t s, size_t stages, int64_t m_count, StageProgram& program) {
    const auto warmup = std::min(static_cast<int64_t>(stages - 1 - s), m_count);
    forwards(program, s, 0, warmup);
    for (int64_t i = 0; i < m_count - warmup; ++i) {
      program.push_back({StageOp::kForward, warmup + i, s});
      program.push_back({StageOp::kBackward, i, s});
    }
    for (int64_t m = m_count - warmup; m < m_count; ++m) program.push_back({StageOp::kBackward, m, s});
  });
}

std::vector<StageProgram> zero_bubble_h1(size_t devices, size_t micro_batches, size_t) {
  return per_stage(devices, micro_batches, [](size_t s, size_t stages, int64_t m_count, StageProgram& program) {
    const auto warmup = std::min(static_cast<int64_t>(stages - 1 - s), m_count);
    const auto deferred = s;  // W passes stage s keeps pending
    std::vector<int64_t> pending;
    const auto backward = [&](int64_t m) {
      program.push_back({StageOp::kBackwardInput, m, s});
      pending.push_back(m);
      if (pending.size() > deferred) {
        program.push_back({StageOp::kBackwardWeight, pending.front(), s});
        pending.erase(pending.begin());
      }
    };
    forwards(program, s, 0, warmup);
    for (int64_t i = 0; i < m_count - warmup; ++i) {
      program.push_back({StageOp::kForward, warmup + i, s});
      backward(i);
    }
    for (int64_t m = m_count - warmup; m < m_count; ++m) backward(m);
    for (auto m : pending) program.push_back({StageOp::kBackwardWeight, m, s});
  });
}

// With one chunk per device, interleaving is 1f1b.
std::vector<StageProgram> interleaved(size_t devices, size_t micro_batches, size_t chunks) {
  return chunks > 1 ? interleaved_1f1b(devices, micro_batches, chunks) : one_f_one_b(devices, micro_batches, 1);
}

}  // namespace

int64_t micro_batch_count(int64_t batch, int64_t split_size) { return (batch + split_size - 1) / split_size; }

const std::vector<ScheduleInfo>& schedule_table() {
  static const std::vector<ScheduleInfo> table = {
      {"tutorial", "forwards as a wavefront, then one loss over every micro-batch and one backward (the tutorial's)",
       /*uses_chunks=*/false, tutorial},
      {"gpipe", "all forwards, then one backward per micro-batch, last first", false, gpipe},
      {"1f1b", "warm-up forwards, then one forward and one backward in turn (PipeDream-flush)", false, one_f_one_b},
      {"interleaved-1f1b",
       "Megatron-LM's: each device holds --chunks non-contiguous stages; the micro-batches must be a multiple of the "
       "devices",
       true, interleaved},
      {"zb-h1", "zero bubble: each backward split into input and weight gradients, the latter deferred", false,
       zero_bubble_h1, /*ideal_work_per_micro_batch=*/3, /*splits_backward=*/true},
  };
  return table;
}

const ScheduleInfo& schedule_info(const std::string& schedule) {
  for (const auto& info : schedule_table()) {
    if (info.name == schedule) return info;
  }
  throw std::invalid_argument("unknown pipeline schedule '" + schedule + "' (allowed: " + schedule_names() + ")");
}

int64_t program_micro_batches(const std::vector<StageProgram>& programs) {
  int64_t highest = -1;
  for (const auto& program : programs) {
    for (const auto& action : program) highest = std::max(highest, action.micro_batch);
  }
  return highest + 1;
}

std::string schedule_names() {
  return joined(schedule_table(), ", ", [](const ScheduleInfo& info) { return info.name; });
}

std::vector<StageProgram> make_schedule(const std::string& schedule, size_t devices, size_t micro_batches,
                                        size_t chunks) {
  const auto& info = schedule_info(schedule);
  if (devices == 0 || micro_batches == 0 || chunks == 0) {
    throw std::invalid_argument("a pipeline schedule needs at least one device, one micro-batch and one chunk");
  }
  if (chunks != 1 && !info.uses_chunks) {
    throw std::invalid_argument("only schedules that take --chunks (interleaved-1f1b) run more than one chunk per device, not " + schedule);
  }
  return info.programs(devices, micro_batches, chunks);
}

double ideal_bubble_fraction(const ScheduleInfo& info, size_t devices, size_t micro_batches, size_t chunks) {
  const double work = static_cast<double>(info.ideal_work_per_micro_batch) * static_cast<double>(info.uses_chunks ? chunks : 1) *
                      static_cast<double>(micro_batches);
  const double idle = static_cast<double>(devices) - 1.0;
  return idle / (work + idle);
}

std::string ideal_bubble_formula(const ScheduleInfo& info) {
  std::string work = info.ideal_work_per_micro_batch == 1 ? "" : std::to_string(info.ideal_work_per_micro_batch);
  if (info.uses_chunks) work += "v";
  return "(S-1)/(" + work + "M+S-1)";
}

const char* op_letter(StageOp op) {
  switch (op) {
    case StageOp::kForward: return "F";
    case StageOp::kBackwardWeight: return "W";
    case StageOp::kBackward:
    case StageOp::kBackwardAll:
    case StageOp::kBackwardInput:
    default: return "B";
  }
}

const char* op_meaning(StageOp op) {
  switch (op) {
    case StageOp::kForward: return "forward";
    case StageOp::kBackward: return "backward";
    case StageOp::kBackwardAll: return "backward of one loss over every micro-batch";
    case StageOp::kBackwardInput: return "input gradient";
    case StageOp::kBackwardWeight: return "weight gradients";
    default: return "unknown";
  }
}

std::vector<StageOp> schedule_ops(const ScheduleInfo& info) {
  std::vector<StageOp> ops;
  for (const auto& program : info.programs(2, 4, info.uses_chunks ? 2 : 1)) {
    for (const auto& action : program) {
      if (std::find(ops.begin(), ops.end(), action.op) == ops.end()) ops.push_back(action.op);
    }
  }
  std::sort(ops.begin(), ops.end());
  return ops;
}

std::string schedule_facts_json() {
  auto facts = nlohmann::ordered_json::array();
  for (const auto& info : schedule_table()) {
    auto ops = nlohmann::ordered_json::array();
    for (const auto op : schedule_ops(info)) ops.push_back({{"letter", op_letter(op)}, {"means", op_meaning(op)}});
    facts.push_back({{"name", info.name},
                     {"ideal_bubble", ideal_bubble_formula(info)},
                     {"ideal_work_per_micro_batch", info.ideal_work_per_micro_batch},
                     {"work_times_chunks", info.uses_chunks},
                     {"ops", ops}});
  }
  return facts.dump();
}

}  // namespace parbench
