#include "core/text.h"
#include "strategies/staged_options.h"
#include "strategies/strategy.h"
#include "strategies/whole_number.h"

#include <algorithm>
#include <stdexcept>

namespace parbench {

std::vector<DeviceModelStates> Strategy::model_states() const {
  std::vector<DeviceModelStates> states(devices_.size());
  if (!model_) return states;
  for (const auto& parameter : model_->module().parameters()) {
    const auto device = std::find(devices_.begin(), devices_.end(), parameter.device());
    if (device != devices_.end()) states[static_cast<size_t>(device - devices_.begin())].parameters.push_back(parameter);
  }
  return states;
}

std::vector<torch::Tensor> Strategy::parameters_for_check() const {
  std::vector<torch::Tensor> tensors;
  for (const auto& parameter : model_->module().parameters()) tensors.push_back(parameter.detach());
  return tensors;
}

std::vector<torch::Tensor> Strategy::gradients_for_check() const {
  std::vector<torch::Tensor> tensors;
  for (const auto& parameter : model_->module().parameters()) tensors.push_back(parameter.grad());
  return tensors;
}

namespace {

// The option's text in `config`, or null where the case holds none.
const std::string* option_text(const RunConfig& config, const std::string& field) {
  const auto found = config.options.find(field);
  return found == config.options.end() ? nullptr : &found->second;
}

}  // namespace

namespace {

// The option's text read whole by `parse` (parse_whole_number or parse_full_number), or
// `fallback` where the case has no such option; text that is not wholly `kind` is refused.
template <typename Value>
Value parsed_option(const RunConfig& config, const std::string& field, Value fallback,
                    std::optional<Value> (*parse)(const std::string&), const std::string& kind) {
  const auto* text = option_text(config, field);
  if (text == nullptr) return fallback;
  if (const auto value = parse(*text)) return *value;
  throw std::invalid_argument("option " + field + "='" + *text + "' is not " + kind);
}

}  // namespace

int64_t option_integer(const RunConfig& config, const std::string& field, int64_t fallback) {
  return parsed_option<int64_t>(config, field, fallback, parse_whole_number, "a whole number");
}

double option_number(const RunConfig& config, const std::string& field, double fallback) {
  return parsed_option<double>(config, field, fallback, parse_full_number, "a number");
}

std::string to_string(Precision precision) { return precision == Precision::kBFloat16 ? "bf16" : "fp32"; }

std::string option_choice(const RunConfig& config, const std::string& field, const std::string& fallback) {
  const auto* text = option_text(config, field);
  return text == nullptr ? fallback : *text;
}

StrategyRegistry& StrategyRegistry::instance() {
  static StrategyRegistry registry;
  return registry;
}

bool StrategyRegistry::add(StrategyInfo info) {
  const std::string name = info.name();
  if (!info.has_class()) {
    throw std::logic_error("strategy '" + name + "' declares no class to run it (StrategyInfo::creates)");
  }
  // One flag sets one strategy's option; a second would take the other's values.
  for (const auto& option : info.options()) {
    // Every case holds --cut under this key (strategies/staged_options.h).
    if (option.field() == kCutField) {
      throw std::logic_error("strategy '" + name + "' declares option " + option.field() +
                             ", the field --cut's placement takes (name it otherwise)");
    }
    for (const auto& [other_name, other] : strategies_) {
      for (const auto& taken : other.options()) {
        // A shared option (--mesh, --sequence-parallel) is the same declaration in each strategy:
        // same field, flag, kind and choices, so one flag's values mean one thing.
        const bool shared = taken.flag() == option.flag() && taken.field() == option.field() &&
                            taken.kind() == option.kind() && taken.choices() == option.choices();
        if (!shared && (taken.flag() == option.flag() || taken.field() == option.field())) {
          throw std::logic_error("strategy '" + name + "' declares option " + option.field() + " (--" + option.flag() +
                                 "), which '" + other_name + "' declares otherwise");
        }
      }
    }
  }
  // Two plug-ins under one name would leave one of them silently unreachable.
  if (!strategies_.emplace(name, std::move(info)).second) {
    throw std::logic_error("strategy '" + name + "' is registered twice");
  }
  return true;
}

const StrategyInfo& StrategyRegistry::get(const std::string& name) const {
  auto it = strategies_.find(name);
  if (it == strategies_.end()) {
    throw std::invalid_argument("unknown strategy '" + name + "' (allowed: " + names() + ")");
  }
  return it->second;
}

std::vector<const StrategyInfo*> StrategyRegistry::all() const {
  std::vector<const StrategyInfo*> result;
  for (const auto& entry : strategies_) result.push_back(&entry.second);
  std::sort(result.begin(), result.end(), [](auto* a, auto* b) { return a->order() < b->order(); });
  return result;
}

std::vector<const StrategyInfo*> StrategyRegistry::default_run() const {
  auto strategies = all();
  strategies.erase(std::remove_if(strategies.begin(), strategies.end(), [](const StrategyInfo* info) { return info->is_opt_in(); }),
                   strategies.end());
  return strategies;
}

std::string StrategyRegistry::names() const {
  return joined(all(), ", ", [](const StrategyInfo* info) { return info->name(); });
}

}  // namespace parbench
