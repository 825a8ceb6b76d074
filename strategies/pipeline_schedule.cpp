#include "strategies/pipeline_schedule.h"

#include <algorithm>
#include <stdexcept>

namespace parbench {

const std::vector<std::string>& pipeline_schedules() {
  static const std::vector<std::string> names = {"tutorial", "gpipe", "1f1b"};
  return names;
}

std::vector<StageProgram> make_schedule(const std::string& schedule, size_t stages, size_t micro_batches) {
  if (stages == 0 || micro_batches == 0) {
    throw std::invalid_argument("a pipeline schedule needs at least one stage and one micro-batch");
  }
  const auto m_count = static_cast<int64_t>(micro_batches);
  std::vector<StageProgram> programs(stages);
  for (size_t s = 0; s < stages; ++s) {
    auto& program = programs[s];
    const auto forwards = [&](int64_t begin, int64_t end) {
      for (int64_t m = begin; m < end; ++m) program.push_back({StageOp::kForward, m});
    };
    const auto backwards_last_first = [&] {
      for (int64_t m = m_count; m-- > 0;) program.push_back({StageOp::kBackward, m});
    };
    if (schedule == "tutorial") {
      forwards(0, m_count);
      if (s + 1 == stages) {
        program.push_back({StageOp::kBackwardAll, -1});
      } else {
        backwards_last_first();
      }
    } else if (schedule == "gpipe") {
      forwards(0, m_count);
      backwards_last_first();
    } else if (schedule == "1f1b") {
      const auto warmup = std::min(static_cast<int64_t>(stages - 1 - s), m_count);
      forwards(0, warmup);
      for (int64_t i = 0; i < m_count - warmup; ++i) {
        program.push_back({StageOp::kForward, warmup + i});
        program.push_back({StageOp::kBackward, i});
      }
      for (int64_t m = m_count - warmup; m < m_count; ++m) program.push_back({StageOp::kBackward, m});
    } else {
      std::string allowed;
      for (const auto& name : pipeline_schedules()) allowed += (allowed.empty() ? "" : ", ") + name;
      throw std::invalid_argument("unknown pipeline schedule '" + schedule + "' (allowed: " + allowed + ")");
    }
  }
  return programs;
}

}  // namespace parbench
