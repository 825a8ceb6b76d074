// Every counter parbench can write, with how to read it: its unit, which way is better, and
// whether one value describes the case, a device, a rank or a stage (google/benchmark's
// Counter flags, as data). The table goes into the JSON's context (`counters`, docs/JSON.md), so
// the gate, the report and the plots read it instead of knowing each counter by name.
//
// The harness's counters are declared in core/counter_table.cpp; a strategy declares the
// counters its counters() reports in its own file, outside its registration:
//   PARBENCH_DECLARE_COUNTER(Counter("broadcast_ms").unit("ms").lower_is_better().means("..."));
#pragma once

#include <string>
#include <vector>

namespace parbench {

enum class Better { kHigher, kLower, kNeither };

// What one value describes. A per-device counter is written once per device as
// `<name>_dev<i>`, a per-stage one as `<name>_stage<s>`, a per-rank one as `<name>_rank<r>`.
// A distributed strategy's per-case counter reaches the JSON under its own name where every rank
// reports the same value, else per rank, as `<name>_rank<r>` (docs/JSON.md).
enum class CounterScope { kCase, kDevice, kRank, kStage };

struct CounterInfo {
  std::string name;  // the counter, or for a per-device, per-rank or per-stage one its stem
  std::string unit;  // "ms", "GiB", "fraction", ... ("" where it has none)
  Better better = Better::kNeither;
  CounterScope per = CounterScope::kCase;
  std::string meaning;  // one line

  // The key as written: "step_ms", "peak_mem_gib_dev<i>", "host_forward_ms_stage<s>".
  std::string key() const;
  bool operator==(const CounterInfo& other) const;
};

// A declaration that reads as a sentence: Counter("step_ms").unit("ms").lower_is_better().
class Counter {
 public:
  explicit Counter(std::string name);
  Counter& unit(std::string unit);
  Counter& higher_is_better();
  Counter& lower_is_better();
  Counter& per_device();
  Counter& per_rank();
  Counter& per_stage();
  Counter& means(std::string meaning);
  operator CounterInfo() const { return info_; }  // NOLINT: a builder converts to what it builds

 private:
  CounterInfo info_;
};

const char* better_name(Better better);      // "higher", "lower", "neither"
const char* scope_name(CounterScope scope);  // "case", "device", "rank", "stage"

// The declared counters. A function-local static: declarations from other files' static
// initialisers are safe.
class CounterTable {
 public:
  static CounterTable& instance();

  // Declares a counter. The same name and scope declared again with the same facts is one
  // declaration (two strategies may share an executor); with other facts it throws
  // std::logic_error naming the counter.
  bool declare(const CounterInfo& info);

  // The harness's counters in core/counter_table.cpp's order, then every other declaration by
  // name: the same order whatever order static initialisers ran in.
  std::vector<CounterInfo> all() const;

  // The declaration a written key belongs to: `step_ms`, `peak_mem_gib_dev1`, a per-case
  // counter's `<name>_rank<r>`; null for a key nothing declares.
  const CounterInfo* find(const std::string& key) const;

  // The table as JSON text, an array of {"name", "key", "unit", "better", "per", "meaning"} in
  // all()'s order: the context's `counters`.
  std::string json() const;

 private:
  CounterTable();
  std::vector<CounterInfo> builtin_;
  std::vector<CounterInfo> declared_;
};

#define PARBENCH_COUNTER_CONCAT_INNER(a, b) a##b
#define PARBENCH_COUNTER_CONCAT(a, b) PARBENCH_COUNTER_CONCAT_INNER(a, b)
#define PARBENCH_DECLARE_COUNTER(...)                                                               \
  static const bool PARBENCH_COUNTER_CONCAT(parbench_counter_declared_, __LINE__) [[maybe_unused]] = \
      ::parbench::CounterTable::instance().declare(__VA_ARGS__)

}  // namespace parbench
