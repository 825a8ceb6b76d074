// The contract every parallelism strategy implements, and the registry that finds them.
// Each strategy is a file under strategies/ (the machinery several share, such as the stage
// executor, lives beside them) that registers itself, with its options, skip rule and
// predictor, through PARBENCH_REGISTER_STRATEGY (docs/EXTENDING.md).
#pragma once

#include "models/model_zoo.h"

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace parbench {

class World;

enum class Precision { kFloat32, kBFloat16 };  // bf16: autocast to bf16, channels-last, fp32 weights
std::string to_string(Precision precision);    // fp32 | bf16, as --precision spells it
// MSE on one-hot labels is the tutorial's. kTokenCrossEntropyChunked: a language model's
// cross-entropy under --checkpoint=blocks, which keeps only the logits and recomputes its softmax
// chunk by chunk in the backward (models/token_cross_entropy.h).
enum class LossKind { kMse, kCrossEntropy, kTokenCrossEntropyChunked };
enum class OptimizerKind { kSgd, kAdamW };      // plain SGD is the tutorial's (strategies/optimizer.h)
// Activations kept for the backward, or each block's recomputed there (models/activation_checkpoint.h).
enum class Checkpointing { kOff, kBlocks };

// What one training step does, and how a strategy is shaped.
struct RunConfig {
  std::string model = "resnet50";
  int64_t num_classes = 1000;
  int64_t batch_size = 120;  // images (language models: sequences) per step in this process
  int64_t image_size = 128;
  int64_t seq_len = 1024;  // language models (StagedModel::takes_tokens): tokens per sequence
  Precision precision = Precision::kFloat32;
  LossKind loss = LossKind::kMse;
  double learning_rate = 1e-3;
  OptimizerKind optimizer = OptimizerKind::kSgd;
  Checkpointing checkpoint = Checkpointing::kOff;

  // The case's devices: a distributed case's ranks (what its options divide the batch among).
  int devices = 1;

  // Distributed strategies: this rank's process group (strategies/distributed/world.h), given by
  // what runs the rank (parbench's launcher, or torchrun's rank itself); not owned, outlives the
  // strategy. Null elsewhere.
  World* world = nullptr;

  // Every strategy option of the case by field (StrategyOption::field), as the case name writes
  // it, and --cut's placement under "cut" (strategies/staged_options.h): what each strategy reads
  // its own options struct from (option_integer, option_number, option_choice below).
  std::map<std::string, std::string> options;
};

// A strategy's options struct is read from RunConfig::options, field by field: the value the case
// holds, or `fallback` (the option's declared default) where it holds none (an option its
// values_for left out, another strategy's case, a config not built from a case). Each throws
// std::invalid_argument naming the field for text that is not such a value.
int64_t option_integer(const RunConfig& config, const std::string& field, int64_t fallback);
double option_number(const RunConfig& config, const std::string& field, double fallback);
std::string option_choice(const RunConfig& config, const std::string& field, const std::string& fallback);

// What one device holds between steps (docs/METRICS.md, "Memory"): the parameters placed on
// it and the optimizer state kept there. Gradients are those parameters' grad().
struct DeviceModelStates {
  std::vector<torch::Tensor> parameters;
  std::vector<torch::Tensor> optimizer_state;
};

// One batch: inputs (N, 3, H, W) and targets, one-hot (N, classes) for MSE or class
// indices (N) for cross-entropy; for a language model, tokens (N, T) and the next tokens (N, T).
struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  // Builds the model from `make_model` and places it on `devices`.
  virtual void setup(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
                     const RunConfig& config) = 0;
  // Where the harness must put a batch's inputs and targets.
  virtual torch::Device input_device() const = 0;
  virtual torch::Device target_device() const = 0;
  // One step: zero grads, forward, loss, backward, optimizer update. Returns the loss without
  // waiting for the devices; all work is ordered before each device's current stream.
  virtual torch::Tensor train_step(const Batch& batch) = 0;

  // Facts about the run for the benchmark label (cut used, schedule, backend, ...).
  virtual std::map<std::string, std::string> describe() const { return {}; }
  // Strategy-specific measurements taken during setup, added to the benchmark's counters
  // (docs/METRICS.md defines each).
  virtual std::map<std::string, double> counters() const { return {}; }
  // Per device, in devices() order: what it holds between steps. By default the model's
  // parameters on the first device equal to theirs, without optimizer state.
  virtual std::vector<DeviceModelStates> model_states() const;
  // The whole model's parameters and their gradients, in the model's parameter order, as
  // single-device training would hold them: what tests compare (PARBENCH_TEST_SAVE_WEIGHTS). A
  // strategy that shards them gathers them here, a collective every rank calls. By default the
  // model's parameters and their grad().
  virtual std::vector<torch::Tensor> parameters_for_check() const;
  virtual std::vector<torch::Tensor> gradients_for_check() const;

  StagedModel& model() const { return *model_; }
  const std::vector<torch::Device>& devices() const { return devices_; }

 protected:
  ModelPtr model_;
  std::vector<torch::Device> devices_;
};

// One option a strategy declares: a command-line flag that takes a list of values, an axis its
// cases sweep, and a field of each case's identity (the name's "/split:20", the JSON's "split").
// Built by kind, then named setters, each returning the option:
//   StrategyOption::integer("split", "split-sizes").help("...").counter("split_size")
// Its slots are private: a declaration names each one it sets. Each case holds the option's value
// in RunConfig::options[field], which the strategy reads into its own options struct.
class StrategyOption {
 public:
  enum class Kind {
    kInteger,  // whole numbers of at least `minimum` (and among `choices`, where given)
    kNumber,   // numbers above 0, written as %g
    kChoice,   // one of `choices`, text
  };
  // The values a case sweeps: given the flag's (or the defaults, `defaulted`) and the case's
  // config so far (its earlier options applied). None leaves the option out of the case.
  using ValuesFor =
      std::function<std::vector<std::string>(const std::vector<std::string>& values, bool defaulted, const RunConfig& config)>;
  // What the value changes in the case's config beyond RunConfig::options, which holds it anyway
  // (ddp's strong scaling divides the batch among the ranks); `devices`: the case's devices (ranks).
  using Apply = std::function<void(RunConfig& config, const std::string& value, int devices)>;

  // `field`: the name's key and the JSON field; `flag`: --flag=LIST.
  static StrategyOption integer(std::string field, std::string flag) {
    return StrategyOption(Kind::kInteger, std::move(field), std::move(flag), {});
  }
  static StrategyOption number(std::string field, std::string flag) {
    return StrategyOption(Kind::kNumber, std::move(field), std::move(flag), {});
  }
  static StrategyOption choice(std::string field, std::string flag, std::vector<std::string> choices) {
    return StrategyOption(Kind::kChoice, std::move(field), std::move(flag), std::move(choices));
  }

  // --help's text for the flag; lines after the first are indented.
  StrategyOption& help(std::string text) { help_ = std::move(text); return *this; }
  // Swept when the flag is not given.
  StrategyOption& defaults(std::vector<std::string> values) { defaults_ = std::move(values); return *this; }
  // An integer's allowed values (a choice's are given when it is made).
  StrategyOption& choices(std::vector<std::string> values) { choices_ = std::move(values); return *this; }
  // An integer's least value (1 unless set).
  StrategyOption& minimum(int64_t value) { minimum_ = value; return *this; }
  // Left out of the case name while the option holds this value, so that names from before the
  // option existed stay as they were (unset: always named).
  StrategyOption& unnamed_value(std::string value) { unnamed_value_ = std::move(value); return *this; }
  // Left out of the case name where the rule holds for the value (a value that depends on the
  // case, as --mesh's every rank on dp does).
  StrategyOption& unnamed_when(std::function<bool(const std::string&)> rule) { unnamed_when_ = std::move(rule); return *this; }
  // Also reported as this counter (a number option's value; unset: not).
  StrategyOption& counter(std::string name) { counter_ = std::move(name); return *this; }
  // Unset: the values as given.
  StrategyOption& values_for(ValuesFor rule) { values_for_ = std::move(rule); return *this; }
  // Unset: the value changes nothing but RunConfig::options.
  StrategyOption& apply(Apply set) { apply_ = std::move(set); return *this; }

  const std::string& field() const { return field_; }
  const std::string& flag() const { return flag_; }
  const std::string& help() const { return help_; }
  Kind kind() const { return kind_; }
  const std::vector<std::string>& choices() const { return choices_; }
  int64_t minimum() const { return minimum_; }
  const std::vector<std::string>& defaults() const { return defaults_; }
  const std::string& unnamed_value() const { return unnamed_value_; }
  // Whether the case name writes this value (unnamed_value and unnamed_when leave it out).
  bool named(const std::string& value) const {
    return (unnamed_value_.empty() || value != unnamed_value_) && !(unnamed_when_ && unnamed_when_(value));
  }
  const std::string& counter() const { return counter_; }
  // The values a case sweeps (values_for's, or `given`).
  std::vector<std::string> values(const std::vector<std::string>& given, bool defaulted, const RunConfig& config) const {
    return values_for_ ? values_for_(given, defaulted, config) : given;
  }
  // Applies what the value changes beyond RunConfig::options, if anything.
  void apply_to(RunConfig& config, const std::string& value, int devices) const {
    if (apply_) apply_(config, value, devices);
  }

 private:
  StrategyOption(Kind kind, std::string field, std::string flag, std::vector<std::string> choices)
      : field_(std::move(field)), flag_(std::move(flag)), kind_(kind), choices_(std::move(choices)) {}

  std::string field_;
  std::string flag_;
  std::string help_;
  Kind kind_;
  std::vector<std::string> choices_;
  int64_t minimum_ = 1;
  std::vector<std::string> defaults_;
  std::string unnamed_value_;
  std::function<bool(const std::string&)> unnamed_when_;
  std::string counter_;
  ValuesFor values_for_;
  Apply apply_;
};

// What a case's set-up looks like to a strategy's skip rule.
struct CaseConditions {
  const RunConfig& config;  // every option applied
  int64_t named_batch = 0;  // the batch in the case's name (--batch)
  int devices = 1;
  int visible_gpus = 0;
  bool cuda_graph = false;
};

// Why a case of a strategy cannot run.
struct CaseObstacle {
  std::string reason;
  // Only the CUDA graph stands in the way: the case is left out where its eager twin runs too.
  bool capture_only = false;
};

struct AdviseProfile;   // strategies/prediction.h
struct ProfileRequest;
struct Prediction;
struct MemoryPrediction;
struct SimulatedStep;   // strategies/schedule_simulator.h

// How --advise predicts a strategy's cases, declared in the strategy's own file
// (strategies/prediction.h has the profile and the shared pieces; benchmarks/advise/advise.h profiles,
// calls the predictors and ranks). A strategy without one is not predicted.
struct StrategyPredictor {
  // The whole model on one device: the profile's reference step, ranked beside every set-up's
  // cases and always run. One strategy is.
  bool reference = false;
  // Its profile needs a GPU per device (collectives across them): not predicted on CPU
  // stand-ins, nor from GPUs that devices share.
  bool needs_gpu_per_device = false;
  // Which of its cases it predicts (unset: every case).
  std::function<bool(const CaseConditions& conditions)> covers;
  // Adds what a case's prediction needs profiled beyond the reference step (unset: nothing).
  // Throws std::exception where the case cannot be modelled (a schedule that cannot be built at
  // its shape): the case is reported and runs unpredicted.
  std::function<void(const CaseConditions& conditions, ProfileRequest& request)> request;
  // The case's step from its set-up's profile. Throws std::exception where the profile lacks
  // what it needs (a cut the model cannot make): the case is reported and runs unpredicted.
  std::function<Prediction(const AdviseProfile& profile, const CaseConditions& conditions)> predict;
  // The simulated step with every action placed, for --trace's predicted timeline (unset: none).
  std::function<SimulatedStep(const AdviseProfile& profile, const CaseConditions& conditions)> simulate;
  // The case's memory per device from the profile's parameters and measured stage activations
  // (AdviseProfile::memory; docs/METRICS.md, "Predicted peak memory"). Unset: not predicted.
  std::function<MemoryPrediction(const AdviseProfile& profile, const CaseConditions& conditions)> memory;
};

// A strategy's declaration: its name and class, then named setters, each returning the declaration:
//   StrategyInfo("ddp").creates<DistributedDataParallel>().summary("...").order(4).distributed()
//       .option(StrategyOption::number("bucket_mib", "bucket-mib").help("...").defaults({"25"}))
//       .predictor(ddp_predictor())
// Its slots are private: a declaration names each one it sets, and readers use the accessors.
class StrategyInfo {
 public:
  // A case of this strategy that cannot run, beyond the devices it needs (nullopt: it can).
  using Obstacle = std::function<std::optional<CaseObstacle>(const CaseConditions& conditions)>;

  explicit StrategyInfo(std::string name) : name_(std::move(name)) {}

  // The class that runs its cases; the registry refuses a declaration without one.
  template <class StrategyClass>
  StrategyInfo& creates() {
    create_ = [] { return std::unique_ptr<Strategy>(std::make_unique<StrategyClass>()); };
    return *this;
  }
  StrategyInfo& summary(std::string text) { summary_ = std::move(text); return *this; }
  // Position in listings (0 unless set).
  StrategyInfo& order(int position) { order_ = position; return *this; }
  // Devices one process needs (1 unless set).
  StrategyInfo& min_devices(int count) { min_devices_ = count; return *this; }
  // One process per device, started by the launcher; its set-up finds its process group in
  // RunConfig::world.
  StrategyInfo& distributed() { distributed_ = true; return *this; }
  // train_step can be captured in a CUDA graph and replayed (benchmarks/measure/graphed_step.h): GPUs
  // only, no host synchronisation, and the same work every step.
  StrategyInfo& graph_capturable() { graph_capturable_ = true; return *this; }
  // Runs only where --strategies names it: left out of the default run, whose cases and wall time
  // stay those of the strategies a first run compares (the sharded and tensor-parallel ones are
  // for models that need them, and are named by whoever wants them).
  StrategyInfo& opt_in() { opt_in_ = true; return *this; }
  // What each of its devices holds, for labels such as "2 stages on 1 GPU" ("devices" unless set).
  StrategyInfo& device_role(std::string role) { device_role_ = std::move(role); return *this; }
  // One of its own options, after those declared before it: the order the case name writes them
  // (benchmarks/cases/cases.h sweeps them).
  StrategyInfo& option(StrategyOption declared) { options_.push_back(std::move(declared)); return *this; }
  // Its skip rule (unset: none beyond the devices it needs).
  StrategyInfo& obstacle(Obstacle rule) { obstacle_ = std::move(rule); return *this; }
  // How --advise predicts its cases (unset: not predicted).
  StrategyInfo& predictor(StrategyPredictor declared) { predictor_ = std::move(declared); return *this; }

  const std::string& name() const { return name_; }
  const std::string& summary() const { return summary_; }
  int order() const { return order_; }
  int min_devices() const { return min_devices_; }
  bool is_distributed() const { return distributed_; }
  bool is_graph_capturable() const { return graph_capturable_; }
  bool is_opt_in() const { return opt_in_; }
  const std::string& device_role() const { return device_role_; }
  const std::vector<StrategyOption>& options() const { return options_; }
  bool has_class() const { return static_cast<bool>(create_); }
  std::unique_ptr<Strategy> create() const { return create_(); }
  std::optional<CaseObstacle> obstacle_in(const CaseConditions& conditions) const {
    return obstacle_ ? obstacle_(conditions) : std::nullopt;
  }
  const StrategyPredictor& predictor() const { return predictor_; }
  // Whether --advise predicts this case of it: it declares a predictor that covers the case.
  bool predicts(const CaseConditions& conditions) const {
    return predictor_.predict && (!predictor_.covers || predictor_.covers(conditions));
  }

 private:
  std::string name_;
  std::function<std::unique_ptr<Strategy>()> create_;
  std::string summary_;
  int order_ = 0;
  int min_devices_ = 1;
  bool distributed_ = false;
  bool graph_capturable_ = false;
  bool opt_in_ = false;
  std::string device_role_ = "devices";
  std::vector<StrategyOption> options_;
  Obstacle obstacle_;
  StrategyPredictor predictor_;
};

// The strategies linked into this binary. A function-local static, so registration from
// other files' static initialisers is safe.
class StrategyRegistry {
 public:
  static StrategyRegistry& instance();

  // Throws std::logic_error for a name already registered, an option field or flag another
  // strategy declared, or a declaration without a class (StrategyInfo::creates).
  bool add(StrategyInfo info);
  // Throws std::invalid_argument naming the allowed strategies.
  const StrategyInfo& get(const std::string& name) const;
  std::vector<const StrategyInfo*> all() const;  // by `order`
  // What runs when --strategies is not given: every strategy but the opt-in ones, by `order`.
  std::vector<const StrategyInfo*> default_run() const;
  std::string names() const;                     // comma-separated, by `order`

 private:
  std::map<std::string, StrategyInfo> strategies_;
};

#define PARBENCH_CONCAT_INNER(a, b) a##b
#define PARBENCH_CONCAT(a, b) PARBENCH_CONCAT_INNER(a, b)
#define PARBENCH_REGISTER_STRATEGY(...)                                              \
  static const bool PARBENCH_CONCAT(parbench_strategy_registered_, __LINE__) [[maybe_unused]] = \
      ::parbench::StrategyRegistry::instance().add(__VA_ARGS__)

}  // namespace parbench
