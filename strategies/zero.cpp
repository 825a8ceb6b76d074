// ZeRO (sharded data parallel): one process per device (a rank), as ddp, each with its own share
// of the batch, but each rank keeps only its shard of what the stage shards
// (docs/STRATEGIES.md, "zero"):
// - stage 1: the optimizer state. Gradients are averaged by all-reduce per bucket during
//   backward, as ddp's; each rank steps its shard of the flat parameters, then the shards are
//   all-gathered back into every rank's whole parameters;
// - stage 2: the gradients too. Each bucket is reduce-scattered into the ranks' shards during
//   backward; the whole bucket is kept only for this step's backward;
// - stage 3 (FSDP): the parameters too. Per unit (a model stage, or a group of them: ResNet's
//   stem, layer1..layer4 and head; GPT's embedding, each block and the head) the whole
//   parameters are all-gathered before its forward and again before its backward, their memory
//   released after each, and the unit's gradients reduce-scattered once its backward is done.
//   The next unit's gather is issued before this unit's work, so it runs beside it (NCCL's own
//   stream on GPUs; the store backend's queue on the CPU).
// Flat layout: per group (a gradient bucket in stages 1 and 2, a unit in stage 3) the parameters
// lie back to back in a flat buffer padded to a multiple of the world size, and rank r owns the
// r-th contiguous shard (strategies/distributed/flat_shards.h). The model's parameters are views
// of their group's buffer, and their gradients views of a flat gradient buffer, so backward
// accumulates straight into what the collectives send.
#include "core/counter_table.h"
#include "core/text.h"
#include "models/autocast_cache.h"
#include "models/model_traits.h"
#include "core/collective_clock.h"
#include "strategies/distributed/collective_lane.h"
#include "strategies/distributed/rank_setup.h"
#include "strategies/distributed/rehearsal_backend.h"
#include "strategies/distributed/flat_shards.h"
#include "strategies/distributed/mesh_training.h"
#include "strategies/distributed/world.h"
#include "core/flat_tensors.h"
#include "strategies/optimizer.h"
#include "strategies/prediction.h"
#include "strategies/strategy.h"
#include "strategies/training.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <set>

namespace parbench {

PARBENCH_DECLARE_COUNTER(Counter("comm_bytes_per_step")
                             .unit("bytes")
                             .lower_is_better()
                             .per_rank()
                             .means("zero: bytes one rank sends per step by the ring algorithms' counts"));
PARBENCH_DECLARE_COUNTER(Counter("zero_gather_wait_ms").unit("ms").lower_is_better().per_rank()
                             .means("zero, GPUs, eager: the compute stream's waits on the last step's all-gathers"));
PARBENCH_DECLARE_COUNTER(Counter("zero_reduce_wait_ms").unit("ms").lower_is_better().per_rank()
                             .means("zero, GPUs, eager: the compute stream's waits on the last step's gradient reductions"));
PARBENCH_DECLARE_COUNTER(Counter("zero_exposed_comm_ms").unit("ms").lower_is_better().per_rank()
                             .means("zero, GPUs, eager: zero_gather_wait_ms + zero_reduce_wait_ms, the exposed communication"));
PARBENCH_DECLARE_COUNTER(Counter("zero_gather_ms").unit("ms").lower_is_better().per_rank()
                             .means("zero, GPUs, eager: one warm-up step's all-gathers' own durations, summed"));
PARBENCH_DECLARE_COUNTER(Counter("zero_reduce_ms").unit("ms").lower_is_better().per_rank()
                             .means("zero, GPUs, eager: one warm-up step's gradient reductions' own durations, summed"));

namespace {

// Stage 3 frees a unit's whole parameters by giving their storage's memory back, so the
// parameters (views of it) and the tensors autograd saved of them stay valid objects; gathering
// again allocates new memory of the same size for the same storage.
void release_memory(const torch::Tensor& flat) {
  auto* storage = flat.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, flat.device()));
  storage->set_nbytes(0);
}

void allocate_memory(const torch::Tensor& flat) {
  auto* storage = flat.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(flat.numel()) * flat.element_size();
  if (storage->nbytes() == bytes) return;
  TORCH_CHECK(storage->allocator(), "zero stage 3: the parameters' storage has no allocator to allocate from");
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

// Bytes one rank sends in the ring algorithms (docs/METRICS.md, "comm_bytes_per_step"): an
// all-gather or a reduce-scatter of N bytes in all sends (w-1)/w N, an all-reduce twice that.
double ring_share(int world) { return static_cast<double>(world - 1) / static_cast<double>(world); }

class Zero;

// Identity forward; its backward runs as the gradient of a stage 3 unit's output arrives, i.e.
// just before the unit's own backward: there the unit's parameters are gathered again.
struct BeforeUnitBackward : torch::autograd::Function<BeforeUnitBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* context, const torch::Tensor& output, Zero* zero,
                               int64_t unit) {
    // The strategy outlives every backward of its steps; IValue holds no raw pointer.
    context->saved_data["zero"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(zero));
    context->saved_data["unit"] = unit;
    return output.view_as(output);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list gradients);
};

class Zero final : public Strategy {
 public:
  Zero() = default;
  // One rank of `rehearsed_world` rehearsed alone on its one device (--advise's profile): rank 0's
  // shards and its own work, its collectives sent nowhere (RehearsalBackend).
  explicit Zero(int rehearsed_world) : rehearsal_(c10::make_intrusive<RehearsalBackend>(rehearsed_world)) {}

  ~Zero() override {
    for (const auto& parameter : parameters_) torch::autograd::impl::set_post_acc_grad_hooks(parameter, nullptr);
  }

  void setup(const ModelFactory& make_model, const std::vector<torch::Device>& devices,
             const RunConfig& config) override {
    if (rehearsal_) {
      TORCH_CHECK(devices.size() == 1, "a rehearsed zero rank runs on one device, got ", devices.size());
      backend_ = rehearsal_;
    } else {
      world_ = &rank_world("zero", config, devices);
      mesh_ = std::make_unique<MeshTraining>(*world_, config);
      // The replica zero shards is the dp group's: with a tp axis, its tp rank's shards.
      backend_ = mesh_->data_parallel_group();
    }
    TORCH_CHECK(config.options.count("stage") != 0, "zero needs its stage option (--zero-stages=1,2,3)");
    stage_ = static_cast<int>(option_integer(config, "stage", 1));
    TORCH_CHECK(stage_ >= 1 && stage_ <= 3, "--zero-stages takes 1, 2 or 3, got ", stage_);
    devices_ = devices;
    config_ = config;
    model_ = mesh_ ? mesh_->build_model(make_model, devices.front(), config.precision)
                   : make_model_on(make_model, devices.front(), config.precision);
    parameters_ = model_->module().parameters();
    auto state = parameters_;
    for (const auto& buffer : model_->module().buffers()) state.push_back(buffer);
    broadcast_from_rank0(state, *backend_);

    // Every stage groups by unit, so that stages 1 and 2 can wait for each unit's updated
    // parameters just before its forward (the gathers hide behind the forward before it).
    build_groups(unit_members());
    std::vector<torch::Tensor> shards;
    for (auto& group : groups_) shards.push_back(group.shard_params);
    optimizer_ = std::make_unique<Optimizer>(shards, config.optimizer, config.learning_rate);
    add_hooks();
    if (stage_ == 3) {
      for (auto& group : groups_) release_whole_parameters(group);
    }
  }

  torch::Device input_device() const override { return devices_.front(); }
  torch::Device target_device() const override { return devices_.front(); }

  torch::Tensor train_step(const Batch& batch) override {
    gather_clock_.start_step();
    reduce_clock_.start_step();
    lane_.start_step(steps_++ == kTimedCollectivesStep);
    prepare_gradients();
    // Stages 1 and 2: the shards the last step updated go to every rank now, unit by unit, and
    // each unit's forward waits for its own (at the end of the last step nothing would hide them).
    if (stage_ != 3) start_gathering_updated_parameters();
    if (mesh_) mesh_->start_step();
    const auto inputs = mesh_ ? mesh_->replica_inputs(batch.inputs) : batch.inputs;
    const auto output = unit_by_unit_forward(inputs);
    const auto loss = mesh_ ? mesh_->loss(output, batch.targets, config_.loss) : compute_loss(output, batch.targets, config_.loss);
    loss.backward();
    finish_gradients();
    sum_partial_gradients();
    optimizer_->step();
    if (mesh_) mesh_->end_step();
    return loss.detach();
  }

  std::vector<DeviceModelStates> model_states() const override { return {{held_, optimizer_->state()}}; }

  std::vector<torch::Tensor> parameters_for_check() const override {
    const auto replica = gathered_for_check(/*gradients=*/false);
    return mesh_ ? mesh_->whole_tensors(replica) : replica;
  }
  std::vector<torch::Tensor> gradients_for_check() const override {
    const auto replica = gathered_for_check(/*gradients=*/true);
    return mesh_ ? mesh_->whole_tensors(replica) : replica;
  }

  std::map<std::string, std::string> describe() const override {
    std::map<std::string, std::string> facts = {{"backend", world_ != nullptr ? world_->backend_name() : backend_->getBackendName()},
                                                {"sharded", stage_ == 1   ? "optimizer state"
                                                            : stage_ == 2 ? "optimizer state, gradients"
                                                                          : "optimizer state, gradients, parameters"},
                                                {"zero", stage_ == 3 ? "ZeRO-3 (FSDP)" : "ZeRO-" + std::to_string(stage_)}};
    facts["units"] = std::to_string(groups_.size());
    if (mesh_) {
      for (const auto& [key, value] : mesh_->facts()) facts[key] = value;
    }
    if (stage_ == 3) {
      // Between steps (the label is taken after the timed steps): units whose whole parameters
      // still have memory, read from their storage. 0 unless a release was missed.
      size_t held = 0;
      for (const auto& group : groups_) held += group.full_params.storage().nbytes() > 0 ? 1 : 0;
      facts["whole_units_held"] = std::to_string(held);
    }
    return facts;
  }

  std::map<std::string, double> counters() const override {
    std::map<std::string, double> values = {{"comm_bytes_per_step", comm_bytes_per_step()}};
    if (mesh_) {
      for (const auto& [key, value] : mesh_->counters()) values[key] = value;
    }
    const auto gathers = gather_clock_.last_step_ms();
    const auto reductions = reduce_clock_.last_step_ms();
    if (gathers && reductions) {
      values["zero_gather_wait_ms"] = *gathers;
      values["zero_reduce_wait_ms"] = *reductions;
      values["zero_exposed_comm_ms"] = *gathers + *reductions;
    }
    const auto gathering = lane_.last_step_ms(kGather);
    const auto reducing = lane_.last_step_ms(kReduce);
    if (gathering && reducing) {
      values["zero_gather_ms"] = *gathering;
      values["zero_reduce_ms"] = *reducing;
    }
    return values;
  }

  // BeforeUnitBackward's: unit `unit`'s backward is next. Its parameters are gathered (the last
  // unit's were kept from its forward), its gradient buffer made, and the unit before it prefetched.
  void before_unit_backward(size_t unit) {
    wait_gathered(unit);
    make_gradient_buffer(groups_[unit]);
    if (unit > 0) start_gather(unit - 1);
  }

 private:
  struct FlatGroup {
    std::string name;
    std::vector<size_t> members;  // indices into parameters_, in flat order
    FlatShardLayout layout;
    torch::Tensor full_params;   // the padded flat parameters; stage 3: memory only while in use
    torch::Tensor shard_params;  // this rank's shard: a view of full_params (stages 1, 2), or its own (3)
    torch::Tensor full_grads;    // stage 1: kept; stages 2, 3: made for a step's backward only
    torch::Tensor shard_grads;   // this rank's averaged gradients: a view of full_grads (stage 1), or its own
    std::vector<torch::Tensor> param_views, grad_views;  // shaped and strided like each member
    size_t pending = 0;          // members whose gradient has not been accumulated this step
    bool reduce_started = false;
    CollectiveLane::Issued gather_work, reduce_work;
  };

  // Stage 3's units: each stage alone, or a run of stages the model groups (ResNet's layer1).
  std::vector<std::vector<size_t>> unit_members() {
    std::map<const torch::TensorImpl*, size_t> index_of;
    for (size_t i = 0; i < parameters_.size(); ++i) index_of[parameters_[i].unsafeGetTensorImpl()] = i;
    std::map<std::string, std::string> group_of;
    for (const auto& group : model_->stage_groups()) {
      for (const auto& stage : group.stages) group_of[stage] = group.name;
    }
    stages_ = model_->stages();
    std::vector<std::vector<size_t>> members;
    std::set<size_t> seen;
    std::string last_unit;
    for (size_t s = 0; s < stages_.size(); ++s) {
      const auto grouped = group_of.find(stages_[s].name);
      const auto unit = grouped == group_of.end() ? stages_[s].name : grouped->second;
      if (members.empty() || unit != last_unit) {
        members.emplace_back();
        unit_names_.push_back(unit);
        unit_stages_.emplace_back();
      }
      last_unit = unit;
      unit_stages_.back().push_back(s);
      for (const auto& module : stages_[s].modules) {
        for (const auto& parameter : module->parameters()) {
          const auto found = index_of.find(parameter.unsafeGetTensorImpl());
          TORCH_CHECK(found != index_of.end(), "zero stage 3: stage ", stages_[s].name,
                      " holds a parameter that is not the model's");
          TORCH_CHECK(seen.insert(found->second).second, "zero stage 3: a parameter of stage ", stages_[s].name,
                      " is in another stage too; each unit must own its parameters");
          members.back().push_back(found->second);
        }
      }
    }
    TORCH_CHECK(seen.size() == parameters_.size(), "zero stage 3: ", parameters_.size() - seen.size(),
                " of the model's parameters are in none of its stages");
    return members;
  }

  // Lays each group out flat, makes the model's parameters views of it, and keeps this rank's shard.
  void build_groups(const std::vector<std::vector<size_t>>& member_lists) {
    torch::NoGradGuard no_grad;
    const int rank = backend_->getRank(), world = backend_->getSize();
    for (size_t g = 0; g < member_lists.size(); ++g) {
      FlatGroup group;
      group.members = member_lists[g];
      group.name = stage_ == 3 ? unit_names_.at(g) : "bucket" + std::to_string(g);
      std::vector<int64_t> numels;
      const auto options = parameters_[group.members.front()].options();
      for (size_t index : group.members) {
        const auto& parameter = parameters_[index];
        TORCH_CHECK(parameter.scalar_type() == options.dtype().toScalarType() && parameter.device() == options.device(),
                    "zero: group ", group.name, " mixes dtypes or devices; each flat group takes one");
        TORCH_CHECK(parameter.is_non_overlapping_and_dense(), "zero needs dense parameters; parameter ", index,
                    " is not");
        numels.push_back(parameter.numel());
      }
      group.layout = FlatShardLayout(numels, world);
      group.full_params = torch::zeros({group.layout.padded()}, options);
      for (size_t k = 0; k < group.members.size(); ++k) {
        auto& parameter = parameters_[group.members[k]];
        auto view = member_view(group.full_params, group.layout.offset(k), parameter);
        view.copy_(parameter);
        parameter.set_data(view);
        group.param_views.push_back(view);
      }
      const auto shard = group.full_params.narrow(0, group.layout.shard_begin(rank), group.layout.shard());
      if (stage_ == 1) {
        group.full_grads = torch::zeros_like(group.full_params);
        group.shard_grads = group.full_grads.narrow(0, group.layout.shard_begin(rank), group.layout.shard());
        group.grad_views = views_like(group, group.full_grads);
      } else {
        group.shard_grads = torch::zeros({group.layout.shard()}, options);
      }
      group.shard_params = stage_ == 3 ? shard.clone() : shard.detach();
      group.shard_params.mutable_grad() = group.shard_grads;
      groups_.push_back(std::move(group));
    }
    // What the rank holds between steps, for the memory counters: whole flat parameters (with
    // their whole gradients in stage 1, the shard's in stage 2), or only the shards (stage 3).
    for (auto& group : groups_) {
      if (stage_ == 1) {
        auto whole = group.full_params.detach();
        whole.mutable_grad() = group.full_grads;
        held_.push_back(whole);
      } else if (stage_ == 2) {
        const int64_t begin = group.layout.shard_begin(rank), end = begin + group.layout.shard();
        held_.push_back(group.full_params.narrow(0, 0, begin).detach());
        held_.push_back(group.shard_params);
        held_.push_back(group.full_params.narrow(0, end, group.layout.padded() - end).detach());
      } else {
        held_.push_back(group.shard_params);
      }
    }
  }

  torch::Tensor member_view(const torch::Tensor& flat, int64_t offset, const torch::Tensor& like) const {
    return flat.as_strided(like.sizes(), like.strides(), flat.storage_offset() + offset);
  }

  std::vector<torch::Tensor> views_like(const FlatGroup& group, const torch::Tensor& flat) const {
    std::vector<torch::Tensor> views;
    for (size_t k = 0; k < group.members.size(); ++k) {
      views.push_back(member_view(flat, group.layout.offset(k), parameters_[group.members[k]]));
    }
    return views;
  }

  // A hook after each parameter's gradient has been accumulated (into its view of the flat
  // gradients), where c10d's Reducer and FSDP2 hook. It lives on the parameter, not on its
  // AccumulateGrad node: a node kept alive from an eager step would run its accumulation on the
  // stream it was made on, the legacy stream, which a CUDA graph's capture on a side stream
  // cannot depend on ("operation would make the legacy stream depend on a capturing blocking
  // stream"). Without a reference the node is made again each backward, on the current stream.
  struct AfterAccumulation final : torch::autograd::PostAccumulateGradHook {
    AfterAccumulation(Zero* zero, size_t index) : zero(zero), index(index) {}
    void operator()(const torch::autograd::Variable&) override { zero->on_gradient_accumulated(index); }
    Zero* zero;
    size_t index;
  };

  void add_hooks() {
    group_of_.assign(parameters_.size(), 0);
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (size_t index : groups_[g].members) group_of_[index] = g;
    }
    for (size_t index = 0; index < parameters_.size(); ++index) {
      TORCH_CHECK(parameters_[index].requires_grad(), "zero: parameter ", index, " does not require grad");
      TORCH_CHECK(!torch::autograd::impl::post_acc_grad_hooks(parameters_[index]),
                  "zero: parameter ", index, " already has a post-accumulate-grad hook");
      torch::autograd::impl::set_post_acc_grad_hooks(parameters_[index],
                                                     std::make_unique<AfterAccumulation>(this, index));
    }
  }

  void make_gradient_buffer(FlatGroup& group) {
    if (group.full_grads.defined()) return;
    group.full_grads = torch::zeros_like(group.full_params);
    group.grad_views = views_like(group, group.full_grads);
    for (size_t k = 0; k < group.members.size(); ++k) {
      parameters_[group.members[k]].mutable_grad() = group.grad_views[k];
    }
  }

  // Every parameter's gradient to a zeroed view of its group's flat gradients, so backward adds
  // into the buffer that is sent. Stage 3 makes a unit's buffer just before the unit's backward.
  void prepare_gradients() {
    for (auto& group : groups_) {
      group.pending = group.members.size();
      group.reduce_started = false;
      group.reduce_work.reset();
      if (stage_ == 1) {
        group.full_grads.zero_();
        for (size_t k = 0; k < group.members.size(); ++k) {
          parameters_[group.members[k]].mutable_grad() = group.grad_views[k];
        }
      } else if (stage_ == 2) {
        make_gradient_buffer(group);
      }
    }
    next_to_reduce_ = 0;
  }

  void on_gradient_accumulated(size_t index) {
    auto& group = groups_[group_of_[index]];
    TORCH_CHECK(group.pending > 0, "zero: parameter ", index, " got a second gradient in one backward; zero expects one");
    if (--group.pending == 0) start_ready_reductions();
  }

  // Reductions start in the same order on every rank, as collectives must: the units last to
  // first, the order in which backward fills them.
  void start_ready_reductions() {
    while (next_to_reduce_ < groups_.size()) {
      const size_t g = groups_.size() - 1 - next_to_reduce_;
      auto& group = groups_[g];
      if (group.pending > 0) return;
      start_reduction(group);
      ++next_to_reduce_;
    }
  }

  void start_reduction(FlatGroup& group) {
    RECORD_USER_SCOPE("zero reduce " + group.name);
    if (stage_ == 1) {
      c10d::AllreduceOptions average;
      average.reduceOp = c10d::ReduceOp::AVG;
      group.reduce_work = lane_.issue(kReduce, group.full_grads, [&] {
        std::vector<at::Tensor> tensors{group.full_grads};
        return backend_->allreduce(tensors, average);
      });
    } else {
      c10d::ReduceScatterOptions average;
      average.reduceOp = c10d::ReduceOp::AVG;
      group.reduce_work = lane_.issue(kReduce, group.full_grads, [&] {
        return backend_->_reduce_scatter_base(group.shard_grads, group.full_grads, average);
      });
    }
    group.reduce_started = true;
    // The unit's backward is done: its whole parameters go (the gradients once the reduction ends).
    if (stage_ == 3) release_parameters(group);
  }

  // After backward: groups with a parameter that got no gradient count it as zero (its view stays
  // zeroed), as ddp does; every reduction is waited for, and stages 2 and 3 drop the whole gradients.
  void finish_gradients() {
    for (size_t g = 0; g < groups_.size(); ++g) {
      auto& group = groups_[g];
      if (group.pending == 0) continue;
      if (stage_ == 3) {
        // The unit's backward never ran (no gradient reached it): its buffer does not exist yet.
        make_gradient_buffer(group);
      }
      group.pending = 0;
    }
    start_ready_reductions();
    for (auto& group : groups_) lane_.wait(group.reduce_work, reduce_clock_, group.shard_params);
    if (stage_ == 1) return;
    if (stage_ == 3) {
      // A unit prefetched for a backward that never reached it: gathered again next step, from
      // the updated shards.
      for (auto& group : groups_) {
        if (group.gather_work) lane_.wait(group.gather_work, gather_clock_, group.shard_params);
        release_parameters(group);
      }
    }
    for (auto& group : groups_) {
      for (size_t index : group.members) parameters_[index].mutable_grad().reset();
      group.full_grads = torch::Tensor();
      group.grad_views.clear();
    }
  }

  // Stages 1 and 2: each rank's updated shard back into every rank's whole parameters, unit by
  // unit in the forward's order; unit_by_unit_forward waits for each. (At the first step the
  // shards are the broadcast parameters' own: gathering them changes nothing.)
  void start_gathering_updated_parameters() {
    for (auto& group : groups_) {
      RECORD_USER_SCOPE("zero gather " + group.name);
      // The input is the output's own slice at this rank's place: NCCL's in-place all-gather.
      group.gather_work = lane_.issue(kGather, group.full_params, [&] {
        return backend_->_allgather_base(group.full_params, group.shard_params);
      });
    }
  }

  // Stage 3.
  void start_gather(size_t unit) {
    auto& group = groups_[unit];
    if (group.gather_work) return;
    RECORD_USER_SCOPE("zero gather " + group.name);
    allocate_memory(group.full_params);
    group.gather_work = lane_.issue(kGather, group.full_params, [&] {
      return backend_->_allgather_base(group.full_params, group.shard_params);
    });
  }

  void wait_gathered(size_t unit) {
    start_gather(unit);
    auto& group = groups_[unit];
    lane_.wait(group.gather_work, gather_clock_, group.shard_params);
  }

  void release_parameters(FlatGroup& group) {
    group.gather_work.reset();
    release_whole_parameters(group);
  }

  // A rehearsed rank keeps its whole parameters, with the values they were built with: its
  // gathers write nothing (RehearsalBackend), so memory allocated afresh would hold leftover
  // bytes for weights. Measured on 2 H200s at their 700 W cap: with such weights the rehearsed
  // stage 3 step came out about 8 ms shorter than stages 1 and 2's (whose weights stay real),
  // and its prediction 10% low. The likely cause: kernels on degenerate values (NaN soon) draw
  // less power, so run at higher clocks under the cap. Its memory is not read
  // (RehearsalRequest::time_only).
  void release_whole_parameters(FlatGroup& group) {
    if (!rehearsal_) release_memory(group.full_params);
  }

  torch::Tensor unit_by_unit_forward(torch::Tensor x) {
    AutocastScope autocast(x.device().type(), model_->autocast_dtype());
    // Stage 3: the cache would keep each unit's cast weights past its release.
    AutocastCacheSetting cast_cache(stage_ != 3 && at::autocast::is_autocast_cache_enabled());
    const size_t units = groups_.size();
    for (size_t u = 0; u < units; ++u) {
      if (stage_ != 3) {
        // The unit's updated parameters, gathered at the step's start.
        lane_.wait(groups_[u].gather_work, gather_clock_, groups_[u].shard_params);
        groups_[u].gather_work.reset();
        for (size_t s : unit_stages_[u]) x = stages_[s].forward(x);
        continue;
      }
      wait_gathered(u);
      if (u + 1 < units) start_gather(u + 1);
      for (size_t s : unit_stages_[u]) x = stages_[s].forward(x);
      // The last unit's backward comes next: its parameters stay.
      if (u + 1 < units) release_parameters(groups_[u]);
      x = BeforeUnitBackward::apply(x, this, static_cast<int64_t>(u));
    }
    return x;
  }

  // The whole model's parameters, or their averaged gradients, in the model's order, gathered
  // from every rank's shards (a collective every rank calls).
  // With sequence parallelism on a mesh's tp axis: the gradients of the parameters each tp rank
  // saw only its slice of the sequence through are partial sums, reduced over dp into this rank's
  // shard like the others. Their part of the shard is summed over tp here, after the reductions:
  // the tp ranks of one dp coordinate lay their (equally shaped) shards out alike.
  void sum_partial_gradients() {
    if (!mesh_ || mesh_->partial_gradient_parameters().empty()) return;
    std::set<const c10::TensorImpl*> partial;
    for (const auto& parameter : mesh_->partial_gradient_parameters()) partial.insert(parameter.unsafeGetTensorImpl());
    const int rank = backend_->getRank();
    std::vector<torch::Tensor> slices;
    for (auto& group : groups_) {
      const int64_t begin = group.layout.shard_begin(rank), end = begin + group.layout.shard();
      for (size_t k = 0; k < group.members.size(); ++k) {
        const auto& parameter = parameters_[group.members[k]];
        if (partial.count(parameter.unsafeGetTensorImpl()) == 0) continue;
        const int64_t from = std::max(begin, group.layout.offset(k));
        const int64_t to = std::min(end, group.layout.offset(k) + parameter.numel());
        if (from < to) slices.push_back(group.shard_grads.narrow(0, from - begin, to - from));
      }
    }
    torch::NoGradGuard no_grad;
    for (const auto& indices : indices_by_dtype(slices)) {
      auto flat = concatenated(slices, indices);
      mesh_->sum_over_tensor_parallel(flat);
      const auto parts = split_like(flat, slices, indices);
      for (size_t k = 0; k < indices.size(); ++k) slices[indices[k]].copy_(parts[k]);
    }
  }

  std::vector<torch::Tensor> gathered_for_check(bool gradients) const {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> whole(parameters_.size());
    for (auto& group : groups_) {
      auto flat = torch::empty({group.layout.padded()}, group.shard_params.options());
      auto shard = (gradients ? group.shard_grads : group.shard_params).contiguous();
      backend_->_allgather_base(flat, shard)->wait();
      for (size_t k = 0; k < group.members.size(); ++k) {
        const auto& parameter = parameters_[group.members[k]];
        whole[group.members[k]] = member_view(flat, group.layout.offset(k), parameter).clone();
      }
    }
    return whole;
  }

  double comm_bytes_per_step() const {
    const double share = ring_share(backend_->getSize());
    double bytes = 0;
    for (size_t g = 0; g < groups_.size(); ++g) {
      const auto& group = groups_[g];
      const double flat = static_cast<double>(group.layout.padded()) * group.full_params.element_size();
      if (stage_ == 1) bytes += 2 * share * flat + share * flat;  // all-reduce, then all-gather
      if (stage_ == 2) bytes += 2 * share * flat;                 // reduce-scatter, then all-gather
      // Gathered for the forward, again for the backward (not the last unit: kept), reduce-scattered.
      if (stage_ == 3) bytes += (g + 1 == groups_.size() ? 2 : 3) * share * flat;
    }
    return bytes;
  }

  RunConfig config_;
  World* world_ = nullptr;                          // null when rehearsed
  std::unique_ptr<MeshTraining> mesh_;              // null when rehearsed
  c10::intrusive_ptr<RehearsalBackend> rehearsal_;  // set when rehearsed
  c10::intrusive_ptr<c10d::Backend> backend_;
  int stage_ = 1;
  std::vector<torch::Tensor> parameters_;  // the model's, in its order
  std::vector<FlatGroup> groups_;
  std::vector<size_t> group_of_;           // per parameter
  std::vector<torch::Tensor> held_;        // model_states()' parameters
  std::unique_ptr<Optimizer> optimizer_;
  // How long the compute stream waits on the gathers and on the reductions (GPUs, eager).
  CollectiveClock gather_clock_, reduce_clock_;
  // The collectives of one step, timed by kind (GPUs, eager): the third (NCCL's communicators and
  // the allocator warmed up), a warm-up step unless --warmup is under 3, since timing them costs
  // the step time (collective_lane.h).
  static constexpr size_t kGather = 0, kReduce = 1;
  static constexpr int64_t kTimedCollectivesStep = 2;
  CollectiveLane lane_{2};
  int64_t steps_ = 0;
  size_t next_to_reduce_ = 0;
  // Stage 3: the model's stages, and per unit its name and stages.
  std::vector<Stage> stages_;
  std::vector<std::string> unit_names_;
  std::vector<std::vector<size_t>> unit_stages_;
};

torch::autograd::variable_list BeforeUnitBackward::backward(torch::autograd::AutogradContext* context,
                                                            torch::autograd::variable_list gradients) {
  auto* zero = reinterpret_cast<Zero*>(static_cast<intptr_t>(context->saved_data["zero"].toInt()));
  zero->before_unit_backward(static_cast<size_t>(context->saved_data["unit"].toInt()));
  return {gradients.at(0), torch::Tensor(), torch::Tensor()};
}

// zero's units (its flat groups) from the memory profile, as Zero::unit_members makes them: each
// stage alone, or a run of stages the model groups; per unit, its parameters' indices.
std::vector<std::vector<size_t>> zero_units(const MemoryProfile& memory) {
  std::vector<std::vector<size_t>> groups;
  std::map<std::string, std::string> group_of;
  for (const auto& group : memory.stage_groups) {
    for (const auto& name : group.stages) group_of[name] = group.name;
  }
  std::vector<std::string> unit_of_stage;
  for (const auto& name : memory.stage_names) {
    const auto grouped = group_of.find(name);
    unit_of_stage.push_back(grouped == group_of.end() ? name : grouped->second);
  }
  std::map<size_t, std::vector<size_t>> by_first_stage;  // a unit's first stage -> its parameters
  for (size_t i = 0; i < memory.parameters.size(); ++i) {
    size_t first = memory.parameter_stage[i];
    while (first > 0 && unit_of_stage[first - 1] == unit_of_stage[first]) --first;
    by_first_stage[first].push_back(i);
  }
  // In the stages' order, as the step gathers them, whatever order the model registers them in.
  for (auto& unit : by_first_stage) groups.push_back(std::move(unit.second));
  return groups;
}

// A unit's flat group's bytes, padded as FlatShardLayout pads it for `world` ranks.
double padded_unit_bytes(const MemoryProfile& memory, const std::vector<size_t>& members, int world) {
  std::vector<int64_t> numels;
  for (auto index : members) numels.push_back(memory.parameters[index].numel());
  return static_cast<double>(FlatShardLayout(numels, world).padded()) *
         static_cast<double>(memory.parameters[members.front()].element_size());
}

// Each unit's share of all of zero's flat bytes, in the stages' order (none without a memory
// profile). Stage 3 gathers the first unit before any compute and reduce-scatters it after the
// whole backward (both show), and keeps the last unit from its forward to its backward (it is
// gathered once).
std::vector<double> unit_shares(const MemoryProfile& memory, int world) {
  std::vector<double> shares;
  double total = 0;
  for (const auto& members : zero_units(memory)) {
    shares.push_back(padded_unit_bytes(memory, members, world));
    total += shares.back();
  }
  for (auto& share : shares) share = total > 0 ? share / total : 0;
  return shares;
}

// --advise: a rank's step (the whole model's at the per-rank batch, the whole optimizer step
// included) plus the collectives, each from ddp's profiled bucket all-reduces by the ring
// relation: an all-gather or reduce-scatter of the same bytes takes half an all-reduce's time;
// what the step does not hide adds whole, what it hides at hidden_comm_cost_ms's rate
// (docs/METRICS.md, "Predicted step time").
// zero's memory per rank (docs/METRICS.md, "Memory"): its flat groups (the units, in every stage)
// laid out as FlatShardLayout pads them; the optimizer steps one shard
// tensor per group. Within the step, stage 2 makes every group's whole gradients at its start,
// kept until backward ends (counted at the step's peak, with the activations); stage 3 makes each
// unit's just before its backward (counted as they grow while the activations are freed), and
// holds two units' gathered parameters (the one at work and the next, prefetched), taken at the
// largest unit.
MemoryPrediction zero_memory(const AdviseProfile& profile, const CaseConditions& conditions) {
  const auto& memory = profile.memory;
  const auto& config = conditions.config;
  const int stage = static_cast<int>(option_integer(config, "stage", 1));
  const int world = conditions.devices;
  const auto groups = zero_units(memory);
  // Its gradients are views of its flat groups, which the step does not set to none; stage 3
  // makes each unit's whole gradients just before the unit's backward, as a step that makes its
  // gradients afresh does: the activations then count them from each unit's backward on, while
  // the units after it have freed theirs.
  DeviceMemory rank = whole_model_memory(memory, config, config.batch_size, /*holds_batch=*/true,
                                         /*fresh_gradients=*/stage == 3);
  // What the rank keeps (below) counts in its peak, the shard's gradients included.
  rank.fresh_gradients = false;
  rank.parameters = rank.gradients = rank.optimizer_state = 0;
  double largest_unit = 0;
  for (const auto& members : groups) {
    std::vector<int64_t> numels;
    for (auto index : members) numels.push_back(memory.parameters[index].numel());
    const FlatShardLayout layout(numels, world);
    const double element = static_cast<double>(memory.parameters[members.front()].element_size());
    const double whole = static_cast<double>(layout.padded()) * element;
    const double shard = static_cast<double>(layout.shard()) * element;
    rank.parameters += stage == 3 ? shard : whole;
    rank.gradients += stage == 1 ? whole : shard;
    if (config.optimizer == OptimizerKind::kAdamW) rank.optimizer_state += 2 * shard + 4;
    if (stage == 2) rank.strategy += whole;
    largest_unit = std::max(largest_unit, whole);
  }
  if (stage == 3) rank.strategy += 2 * largest_unit;
  return MemoryPrediction{std::vector<DeviceMemory>(static_cast<size_t>(world), rank)};
}

// The key of a zero case's rank rehearsal: what its rehearsed step depends on.
std::string zero_rehearsal_key(const CaseConditions& conditions) {
  const auto& config = conditions.config;
  return "zero/" + config.model + "/world:" + std::to_string(conditions.devices) +
         "/stage:" + config.options.at("stage") + "/batch:" + std::to_string(config.batch_size) +
         "/seq:" + std::to_string(config.seq_len) + "/image:" + std::to_string(config.image_size) +
         "/precision:" + to_string(config.precision) +
         "/checkpoint:" + to_string(config.checkpoint) + "/optimizer:" + to_string(config.optimizer);
}

StrategyPredictor zero_predictor() {
  auto predictor = rank_predictor(at_bucket_and_batch, [](const AdviseProfile& profile, const CaseConditions& conditions,
                                        const RankProfile& rank) {
    const int stage = static_cast<int>(option_integer(conditions.config, "stage", 1));
    // The rank's own work: its step rehearsed alone (its collectives sent nowhere), which steps
    // the optimizer on its shard and does zero's own copies, gradient buffers and waits (not
    // stage 3's per-unit allocations: a rehearsed rank keeps its whole parameters); single's
    // whole step where the rehearsal failed.
    const auto rehearsed = profile.rehearsals.find(zero_rehearsal_key(conditions));
    const double own_step_ms = rehearsed != profile.rehearsals.end() ? rehearsed->second.step_ms : rank.rank_step_ms;
    std::vector<double> half_ms;
    double allreduce_total_ms = 0;
    for (double ms : rank.bucket_allreduce_ms) {
      half_ms.push_back(ms / 2);
      allreduce_total_ms += ms;
    }
    const double gather_ms = allreduce_total_ms / 2;  // all of the parameters once
    // Stage 3 gathers its first unit before any compute, and reduce-scatters it after the whole
    // backward (the last gradients to come): both show whole. (Stages 1 and 2 gather at the
    // step's start, behind its set-up, and their reductions are ddp's buckets, tail included.)
    const auto shares = stage == 3 ? unit_shares(profile.memory, conditions.devices) : std::vector<double>{};
    const double first_unit_ms = shares.empty() ? 0 : shares.front() * gather_ms;
    const double last_unit_ms = shares.empty() ? 0 : shares.back() * gather_ms;
    // Every stage's (other) first gathers hide behind the forward (what is not backward), as far
    // as it lasts.
    const double forward_ms = std::max(0.0, rank.rank_step_ms - rank.backward_ms);
    double exposed_ms = first_unit_ms + std::max(0.0, gather_ms - first_unit_ms - forward_ms);
    double comm_ms = gather_ms;
    if (stage == 1) {
      exposed_ms += exposed_allreduce_ms(rank.bucket_ready_ms, rank.bucket_allreduce_ms, rank.backward_ms, true);
      comm_ms += allreduce_total_ms;
    } else if (stage == 2) {
      exposed_ms += exposed_allreduce_ms(rank.bucket_ready_ms, half_ms, rank.backward_ms, true);
      comm_ms += allreduce_total_ms / 2;
    } else {
      // The second gathers (all but the last unit's, kept) and the reduce-scatters behind the
      // backward, but the first unit's reduce-scatter after it.
      const double backward_comm_ms = 2 * gather_ms - last_unit_ms;
      exposed_ms += first_unit_ms + std::max(0.0, backward_comm_ms - first_unit_ms - rank.backward_ms);
      comm_ms += backward_comm_ms;
    }
    // What is hidden still costs the step (hidden_comm_cost_ms).
    return Prediction{own_step_ms + exposed_ms + hidden_comm_cost_ms(rank, comm_ms - exposed_ms),
                      rehearsed != profile.rehearsals.end() ? "rehearsal" : profile.parts.cut};
  });
  const auto ask_rank = predictor.request;
  predictor.request = [ask_rank](const CaseConditions& conditions, ProfileRequest& request) {
    ask_rank(conditions, request);
    const int world = conditions.devices;
    RehearsalRequest rehearsal{[world] { return std::unique_ptr<Strategy>(std::make_unique<Zero>(world)); },
                               conditions.config};
    rehearsal.time_only = true;
    request.rehearsals[zero_rehearsal_key(conditions)] = rehearsal;
  };
  predictor.memory = zero_memory;
  return predictor;
}

StrategyInfo zero_info() {
  return StrategyInfo("zero")
      .creates<Zero>()
      .summary("one process per device; ZeRO stage 1 (optimizer state sharded), 2 (and gradients) or "
               "3 (and parameters: ZeRO-3 (FSDP))")
      .order(5)
      .distributed()
      .opt_in()
      .graph_capturable()
      .device_role("ranks")
      .option(StrategyOption::integer("stage", "zero-stages")
                  .help("zero: what is sharded across ranks: 1 optimizer state, 2 and gradients, 3 and "
                        "parameters (ZeRO-3, FSDP); default 1,2,3")
                  .choices({"1", "2", "3"})
                  .defaults({"1", "2", "3"}))
      .option(mesh_option("zero"))
      .option(mesh_sequence_parallel_option("zero"))
      .obstacle([](const CaseConditions& conditions) -> std::optional<CaseObstacle> {
        if (auto obstacle = mesh_obstacle(conditions)) return obstacle;
        if (conditions.config.options.at("stage") == "3") {
          const auto reason = shared_weights_obstacle(
              conditions.config.model, "zero stage 3 gathers and frees each stage's parameters as a unit of its own");
          if (!reason.empty()) return CaseObstacle{reason};
        }
        if (conditions.cuda_graph && conditions.config.options.at("stage") == "3") {
          return CaseObstacle{"zero stage 3 frees and reallocates each unit's parameters by host code every step, "
                              "which a CUDA graph would replay at captured addresses",
                              /*capture_only=*/true};
        }
        return std::nullopt;
      })
      .predictor(one_axis_only(zero_predictor()));
}

PARBENCH_REGISTER_STRATEGY(zero_info());

}  // namespace
}  // namespace parbench
