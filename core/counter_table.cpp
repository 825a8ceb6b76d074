#include "core/counter_table.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace parbench {
namespace {

// The harness's own counters (docs/JSON.md, "Counters on train/... cases" and comm/allreduce's),
// whichever strategy runs. A strategy's own counters are declared in its file.
std::vector<CounterInfo> harness_counters() {
  return {
      Counter("items_per_second").unit("items/s").higher_is_better()
          .means("images (language models: sequences) per second, global batch"),
      Counter("tokens_per_second").unit("tokens/s").higher_is_better()
          .means("language models: tokens per second, global batch"),
      Counter("step_ms").unit("ms").lower_is_better().means("milliseconds per training step"),
      Counter("tflops").unit("TFLOP/s").higher_is_better().means("achieved TFLOP/s, 3 x forward FLOPs"),
      Counter("mfu").unit("fraction").higher_is_better().means("model FLOPs utilisation against the datasheet peak"),
      Counter("peak_tflops").unit("TFLOP/s").means("the datasheet's dense peak per GPU at the case's math"),
      Counter("mfu_gemm").unit("fraction").higher_is_better().means("MFU against the GEMM probe's peak"),
      Counter("gemm_tflops").unit("TFLOP/s").means("the GEMM probe's peak per GPU at the case's math"),
      Counter("params").unit("parameters").means("model parameters"),
      Counter("batch").unit("items").means("global batch per step, all devices and ranks"),
      Counter("image").unit("pixels").means("image side"),
      Counter("seq").unit("tokens").means("language models: tokens per sequence"),
      Counter("gpus").unit("devices").means("devices the case used"),
      Counter("predicted_step_ms").unit("ms").lower_is_better().means("--advise: the predicted step"),
      Counter("predicted_rank").unit("rank").lower_is_better().means("--advise: the prediction's place, 1 fastest"),
      Counter("predicted_peak_gib").unit("GiB").lower_is_better().per_device()
          .means("--advise: the predicted peak allocated memory"),
      Counter("peak_mem_gib").unit("GiB").lower_is_better().per_device()
          .means("peak allocated since the case's set-up"),
      Counter("busy_frac").unit("fraction").higher_is_better().per_device()
          .means("fraction of the step the device ran kernels"),
      Counter("bubble_frac").unit("fraction").lower_is_better().per_device().means("1 - busy_frac"),
      Counter("param_mem_gib").unit("GiB").lower_is_better().per_device().means("parameters between steps"),
      Counter("grad_mem_gib").unit("GiB").lower_is_better().per_device().means("gradients between steps"),
      Counter("optim_mem_gib").unit("GiB").lower_is_better().per_device().means("optimizer state between steps"),
      Counter("model_state_mem_gib").unit("GiB").lower_is_better().per_device()
          .means("parameters, gradients and optimizer state between steps"),
      Counter("activation_mem_gib").unit("GiB").lower_is_better().per_device()
          .means("what a step adds at its peak"),
      Counter("peak_reserved_gib").unit("GiB").lower_is_better().per_device().means("peak reserved by the allocator"),
      Counter("alloc_retries").unit("count").lower_is_better().per_device().means("the allocator's retries"),
      Counter("ooms").unit("count").lower_is_better().per_device().means("the allocator's out-of-memory errors"),
      Counter("world_size").unit("ranks").means("ddp: ranks"),
      Counter("step_ms_rank_spread").unit("fraction").lower_is_better()
          .means("ddp: (max - min) / median of the ranks' step times"),
      Counter("iteration_max_over_median").unit("ratio").lower_is_better()
          .means("the repetition's slowest iteration over its median one"),
      Counter("stalled").unit("flag").lower_is_better().means("1 where the repetition stalled"),
      Counter("sm_clock_mhz").unit("MHz").higher_is_better().per_device().means("SM clock after the repetition"),
      Counter("sm_clock_max_mhz").unit("MHz").per_device().means("the SM clock's maximum"),
      Counter("power_w").unit("W").per_device().means("board power after the repetition"),
      Counter("temperature_c").unit("degC").per_device().means("core temperature after the repetition"),
      Counter("throttle_reasons").unit("bitmask").per_device().means("NVML's clock-event reasons"),
      Counter("throttled").unit("flag").lower_is_better().means("1 if any GPU ran the repetition throttled"),
      Counter("bytes").unit("bytes").means("comm/allreduce: the message"),
      Counter("algbw_gbps").unit("GB/s").higher_is_better().means("comm/allreduce: bytes / time"),
      Counter("busbw_gbps").unit("GB/s").higher_is_better().means("comm/allreduce: algbw x 2(n-1)/n"),
  };
}

const char* key_suffix(CounterScope scope) {
  switch (scope) {
    case CounterScope::kDevice: return "_dev";
    case CounterScope::kRank: return "_rank";
    case CounterScope::kStage: return "_stage";
    case CounterScope::kCase:
    default: return "";
  }
}

// `key` is `stem` + `suffix` + a whole number.
bool numbered(const std::string& key, const std::string& stem, const std::string& suffix) {
  const auto prefix = stem + suffix;
  if (key.size() <= prefix.size() || key.compare(0, prefix.size(), prefix) != 0) return false;
  return std::all_of(key.begin() + static_cast<std::ptrdiff_t>(prefix.size()), key.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; });
}

const CounterInfo* find_in(const std::vector<CounterInfo>& table, const std::string& key) {
  for (const auto& info : table) {
    if (info.per == CounterScope::kCase ? (info.name == key || numbered(key, info.name, "_rank"))
                                        : numbered(key, info.name, key_suffix(info.per))) {
      return &info;
    }
  }
  return nullptr;
}

}  // namespace

std::string CounterInfo::key() const {
  if (per == CounterScope::kCase) return name;
  const std::string index = per == CounterScope::kDevice ? "<i>" : per == CounterScope::kRank ? "<r>" : "<s>";
  return name + key_suffix(per) + index;
}

bool CounterInfo::operator==(const CounterInfo& other) const {
  return name == other.name && unit == other.unit && better == other.better && per == other.per &&
         meaning == other.meaning;
}

Counter::Counter(std::string name) { info_.name = std::move(name); }
Counter& Counter::unit(std::string unit) {
  info_.unit = std::move(unit);
  return *this;
}
Counter& Counter::higher_is_better() {
  info_.better = Better::kHigher;
  return *this;
}
Counter& Counter::lower_is_better() {
  info_.better = Better::kLower;
  return *this;
}
Counter& Counter::per_device() {
  info_.per = CounterScope::kDevice;
  return *this;
}
Counter& Counter::per_rank() {
  info_.per = CounterScope::kRank;
  return *this;
}
Counter& Counter::per_stage() {
  info_.per = CounterScope::kStage;
  return *this;
}
Counter& Counter::means(std::string meaning) {
  info_.meaning = std::move(meaning);
  return *this;
}

const char* better_name(Better better) {
  switch (better) {
    case Better::kHigher: return "higher";
    case Better::kLower: return "lower";
    case Better::kNeither:
    default: return "neither";
  }
}

const char* scope_name(CounterScope scope) {
  switch (scope) {
    case CounterScope::kDevice: return "device";
    case CounterScope::kRank: return "rank";
    case CounterScope::kStage: return "stage";
    case CounterScope::kCase:
    default: return "case";
  }
}

CounterTable::CounterTable() : builtin_(harness_counters()) {}

CounterTable& CounterTable::instance() {
  static CounterTable table;
  return table;
}

bool CounterTable::declare(const CounterInfo& info) {
  if (info.name.empty()) throw std::logic_error("a counter is declared without a name");
  for (const auto* table : {&builtin_, &declared_}) {
    for (const auto& existing : *table) {
      if (existing.name != info.name || existing.per != info.per) continue;
      if (existing == info) return true;
      throw std::logic_error("counter '" + info.key() + "' is declared twice with different facts");
    }
  }
  declared_.push_back(info);
  return true;
}

std::vector<CounterInfo> CounterTable::all() const {
  auto declared = declared_;
  std::stable_sort(declared.begin(), declared.end(), [](const CounterInfo& a, const CounterInfo& b) {
    return a.name != b.name ? a.name < b.name : a.per < b.per;
  });
  auto result = builtin_;
  result.insert(result.end(), declared.begin(), declared.end());
  return result;
}

const CounterInfo* CounterTable::find(const std::string& key) const {
  // Exact names first: `host_forward_ms` is data_parallel's own, `host_forward_ms_stage0` a stage's.
  for (const auto* table : {&builtin_, &declared_}) {
    for (const auto& info : *table) {
      if (info.per == CounterScope::kCase && info.name == key) return &info;
    }
  }
  if (const auto* info = find_in(builtin_, key)) return info;
  return find_in(declared_, key);
}

std::string CounterTable::json() const {
  auto table = nlohmann::ordered_json::array();
  for (const auto& info : all()) {
    table.push_back({{"name", info.name},
                     {"key", info.key()},
                     {"unit", info.unit},
                     {"better", better_name(info.better)},
                     {"per", scope_name(info.per)},
                     {"meaning", info.meaning}});
  }
  return table.dump();
}

}  // namespace parbench
