// The contract every parallelism strategy implements, and the registry that finds them.
// Each strategy is a file under strategies/ (the machinery several share, such as the stage
// executor, lives beside them) that registers itself, with its options, skip rule and advise
// model, through PARBENCH_REGISTER_STRATEGY (docs/EXTENDING.md).
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
enum class LossKind { kMse, kCrossEntropy };   // MSE on one-hot labels is the tutorial's
enum class OptimizerKind { kSgd, kAdamW };      // plain SGD is the tutorial's (strategies/optimizer.h)

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

  // model_parallel and pipeline: "" (the default cut), "balanced", or stage names per device,
  // devices separated by '|' and stages by ',': "stem,layer1,layer2|layer3,layer4,head".
  std::string cut;
  // pipeline: micro-batch size and schedule (strategies/pipeline_schedule.h).
  int64_t split_size = 0;
  std::string schedule = "tutorial";
  // interleaved-1f1b: model chunks (stages) per device.
  int chunks = 2;
  // pipeline on GPUs: compute streams per stage (1, or 2 so that forwards overlap backwards).
  int stage_lanes = 1;

  // data_parallel: "broadcast" (replicas built once, parameters broadcast every step, as
  // PyTorch's DataParallel) or "clone" (LibTorch's data_parallel: replicas cloned every step).
  std::string dp_replicate = "broadcast";

  // ddp: gradient bucket size, and whether all-reduces start during backward.
  double bucket_mib = 25.0;
  bool overlap = true;

  // Distributed strategies: this rank's process group (strategies/distributed/world.h), given by
  // what runs the rank (parbench's launcher, or torchrun's rank itself); not owned, outlives the
  // strategy. Null elsewhere.
  World* world = nullptr;

  // Every strategy option of the case by field (StrategyOption::field), as the case name writes
  // it: what a strategy without a typed member above reads its options from.
  std::map<std::string, std::string> options;
};

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

  StagedModel& model() const { return *model_; }
  const std::vector<torch::Device>& devices() const { return devices_; }

 protected:
  ModelPtr model_;
  std::vector<torch::Device> devices_;
};

// One option a strategy declares: a command-line flag that takes a list of values, an axis its
// cases sweep, and a field of each case's identity (the name's "/split:20", the JSON's "split").
struct StrategyOption {
  enum class Kind {
    kInteger,  // whole numbers of at least `minimum` (and among `choices`, where given)
    kNumber,   // numbers above 0, written as %g
    kChoice,   // one of `choices`, text
  };
  std::string field;  // the name's key and the JSON field
  std::string flag;   // --flag=LIST
  std::string help;   // --help's text for the flag; lines after the first are indented
  Kind kind = Kind::kChoice;
  std::vector<std::string> choices;
  int64_t minimum = 1;
  std::vector<std::string> defaults;  // swept when the flag is not given
  // Left out of the case name while the option holds this value, so that names from before the
  // option existed stay as they were ("" : always named).
  std::string unnamed_value;
  // Also reported as this counter (a number option's value; "" : not).
  std::string counter;
  // The values a case sweeps: given the flag's (or the defaults, `defaulted`) and the case's
  // config so far (its earlier options applied). None leaves the option out of the case. Unset:
  // the values as given.
  std::function<std::vector<std::string>(const std::vector<std::string>& values, bool defaulted, const RunConfig& config)>
      values_for;
  // Sets a typed member of RunConfig from the value; `devices`: the case's devices (ranks).
  // Unset: the strategy reads RunConfig::options alone.
  std::function<void(RunConfig& config, const std::string& value, int devices)> apply;
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

// How --advise predicts a strategy's step from its profile (benchmarks/advise.h).
enum class AdviseModel {
  kNone,
  kWholeModel,        // one device's step: single's profile
  kStaged,            // stages on devices: the schedule simulator over the profiled parts
  kReplicated,        // replicas in one process: broadcast, side-by-side shards, reduce
  kRankedAllReduce,   // one process per device: a rank's step plus the all-reduce backward does not hide
};

struct StrategyInfo {
  std::string name;
  std::string summary;
  int order = 0;            // position in listings
  int min_devices = 1;      // devices one process needs
  bool distributed = false; // one process per device, started by the launcher
  std::function<std::unique_ptr<Strategy>()> create;
  // train_step can be captured in a CUDA graph and replayed (benchmarks/graphed_step.h): GPUs
  // only, no host synchronisation, and the same work every step.
  bool graph_capturable = false;
  // What each of its devices holds, for labels such as "2 stages on 1 GPU".
  std::string device_role = "devices";
  // Its own options, in the order the case name writes them (benchmarks/cases.h sweeps them).
  std::vector<StrategyOption> options;
  // A case of this strategy that cannot run, beyond the devices it needs: unset where none.
  std::function<std::optional<CaseObstacle>(const CaseConditions& conditions)> obstacle;
  // What --advise predicts its cases from (benchmarks/advise.h); kNone: not predicted.
  AdviseModel advise_model = AdviseModel::kNone;
  // Whether --advise's model covers this case (its options); unset: every case.
  std::function<bool(const CaseConditions& conditions)> advised;
};

// The strategies linked into this binary. A function-local static, so registration from
// other files' static initialisers is safe.
class StrategyRegistry {
 public:
  static StrategyRegistry& instance();

  // Throws std::logic_error for a name already registered.
  bool add(StrategyInfo info);
  // Throws std::invalid_argument naming the allowed strategies.
  const StrategyInfo& get(const std::string& name) const;
  std::vector<const StrategyInfo*> all() const;  // by `order`
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
