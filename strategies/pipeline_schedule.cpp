#include "strategies/pipeline_schedule.h"

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

}  // namespace

int64_t micro_batch_count(int64_t batch, int64_t split_size) { return (batch + split_size - 1) / split_size; }

const std::vector<std::string>& pipeline_schedules() {
  static const std::vector<std::string> names = {"tutorial", "gpipe", "1f1b", "interleaved-1f1b", "zb-h1"};
  return names;
}

std::vector<StageProgram> make_schedule(const std::string& schedule, size_t devices, size_t micro_batches,
                                        size_t chunks) {
  if (devices == 0 || micro_batches == 0 || chunks == 0) {
    throw std::invalid_argument("a pipeline schedule needs at least one device, one micro-batch and one chunk");
  }
  if (schedule == "interleaved-1f1b" && chunks > 1) return interleaved_1f1b(devices, micro_batches, chunks);
  if (chunks != 1 && schedule != "interleaved-1f1b") {
    throw std::invalid_argument("only interleaved-1f1b runs more than one chunk per device, not " + schedule);
  }
  const size_t stages = devices;
  const auto m_count = static_cast<int64_t>(micro_batches);
  std::vector<StageProgram> programs(stages);
  for (size_t s = 0; s < stages; ++s) {
    auto& program = programs[s];
    const auto forwards = [&](int64_t begin, int64_t end) {
      for (int64_t m = begin; m < end; ++m) program.push_back({StageOp::kForward, m, s});
    };
    const auto backwards_last_first = [&] {
      for (int64_t m = m_count; m-- > 0;) program.push_back({StageOp::kBackward, m, s});
    };
    if (schedule == "tutorial") {
      forwards(0, m_count);
      if (s + 1 == stages) {
        program.push_back({StageOp::kBackwardAll, -1, s});
      } else {
        backwards_last_first();
      }
    } else if (schedule == "gpipe") {
      forwards(0, m_count);
      backwards_last_first();
    } else if (schedule == "zb-h1") {
      const auto warmup = std::min(static_cast<int64_t>(stages - 1 - s), m_count);
      const auto deferred = static_cast<size_t>(s);  // W passes stage s keeps pending
      std::vector<int64_t> pending;
      const auto backward = [&](int64_t m) {
        program.push_back({StageOp::kBackwardInput, m, s});
        pending.push_back(m);
        if (pending.size() > deferred) {
          program.push_back({StageOp::kBackwardWeight, pending.front(), s});
          pending.erase(pending.begin());
        }
      };
      forwards(0, warmup);
      for (int64_t i = 0; i < m_count - warmup; ++i) {
        program.push_back({StageOp::kForward, warmup + i, s});
        backward(i);
      }
      for (int64_t m = m_count - warmup; m < m_count; ++m) backward(m);
      for (auto m : pending) program.push_back({StageOp::kBackwardWeight, m, s});
    } else if (schedule == "1f1b" || schedule == "interleaved-1f1b") {  // one chunk: interleaving is 1f1b
      const auto warmup = std::min(static_cast<int64_t>(stages - 1 - s), m_count);
      forwards(0, warmup);
      for (int64_t i = 0; i < m_count - warmup; ++i) {
        program.push_back({StageOp::kForward, warmup + i, s});
        program.push_back({StageOp::kBackward, i, s});
      }
      for (int64_t m = m_count - warmup; m < m_count; ++m) program.push_back({StageOp::kBackward, m, s});
    } else {
      std::string allowed;
      for (const auto& name : pipeline_schedules()) allowed += (allowed.empty() ? "" : ", ") + name;
      throw std::invalid_argument("unknown pipeline schedule '" + schedule + "' (allowed: " + allowed + ")");
    }
  }
  return programs;
}

}  // namespace parbench
