// parbench --advise: predicts, from a short profile, the step time of the cases whose strategy
// declares a predictor that covers them (StrategyInfo::predictor, strategies/prediction.h),
// ranks each set-up's cases, and runs the whole-model reference (the predictor marked
// `reference`) and the best predicted ones to check the predictions; the others are left out,
// with a line saying how many.
//
// The profile, per set-up (model, batch, image, precision, data), on the devices the
// multi-device cases use, measures what their predictors ask for (ProfileRequest): the
// reference step always; each cut the cases run, chosen as they choose it (one part per device,
// or round-robin v x devices parts for v chunks per device) and profiled once per distinct cut:
// each part's forward and backward (the loss included on the last part) and the copy of its
// output to the next device, at the micro-batch sizes the cases run, the shards of the batch
// over the devices and the whole batch, and each part's update by the case's optimizer; each
// backward split as the executor splits zb-h1's, the input gradient (B) and then the weight
// gradients (W); a strategy's own counters from one set-up on the devices
// (data_parallel's broadcast and reduction); and, per bucket size and per-rank batch, the
// reference step at the per-rank batch, each stage's backward there and each gradient
// bucket's all-reduce across the GPUs. Each is the median of 5 synchronised runs after an
// untimed one: replays of the piece captured in a CUDA graph for --cuda-graph=on cases on GPUs,
// else eager runs (which on GPUs include the host's dispatch, as the eager steps they predict
// do). Each strategy's predictor turns the profile into its step (single: the reference;
// model_parallel and pipeline: strategies/prediction.h's staged predictor, the schedule
// simulator; data_parallel, ddp, zero and tensor_parallel: in their own files). docs/METRICS.md ("Predicted step time")
// has the models.
//
// Memory: a second profile, apart (benchmarks/advise/advise_memory.h), measures each model stage's
// activations one stage at a time, and each strategy's StrategyPredictor::memory predicts every
// device's peak from it (docs/METRICS.md, "Predicted peak memory"). The table gives the fullest
// device's; a case above the device's capacity is flagged, ranked after every case that fits, and
// still runs. Every case of a set-up whose time profile failed has its memory predicted alone:
// listed with time "-", after the timed cases, and run. Checkpointed cases are timed from a
// profile of their own, its pieces checkpointed as theirs are.
#pragma once

#include "benchmarks/cases/cases.h"
#include "strategies/prediction.h"
#include "strategies/schedule_simulator.h"

#include <map>
#include <optional>
#include <set>
#include <utility>

namespace parbench {

// Profiles `spec`'s set-up (spec.config.batch_size: the set-up's whole batch): the reference
// step on the first of `devices` and, given more than one device (they may repeat one GPU),
// what `request` asks for on them; the ranks' all-reduces need distinct GPUs. A cut the model
// cannot make (more parts than it has stages, a --cut of other parts) is left out of `cuts`.
AdviseProfile profile_setup(const CaseSpec& spec, const std::vector<torch::Device>& devices, bool graphed,
                            const ProfileRequest& request);

// Rehearses one rank (ProfileRequest::rehearsals) on `device`: set up under request.config,
// warmed up, one eager step's memory measured, then (`graphed`: captured in a CUDA graph and
// replayed) its median step timed. advise() rehearses the ranks its set-ups' requests name, each
// apart from the set-up's time profile.
Rehearsal rehearse(const RehearsalRequest& request, torch::Device device, bool graphed);

// The simulated step of one case whose predictor simulates one (StrategyPredictor::simulate:
// model_parallel, pipeline), as advise predicts it (profiled on the case's devices, eager or
// graphed as the case runs), with every action placed; nullopt for a case advise does not model
// (see advise()) or its predictor cannot.
std::optional<SimulatedStep> simulate_case(const CaseSpec& spec);

// Profiles and predicts every set-up of `cases`, prints the ranked predictions, records them in
// the run's context (advise_predictions, advise_profile_s) and returns the cases to run: per
// set-up the reference and the `options.advise_validate` best predicted (all of them for
// kValidateAll), each carrying its prediction. A set-up is a global batch: ddp's strong-scaling
// cases join the others', its weak-scaling ones make their own. In a scaling run (--gpus=LIST)
// whose set-up has multi-device cases at several counts, each count is a set-up of its own:
// profiled on its devices, ranked and validated apart, with the reference case in each ranking
// (its prediction recorded from the first count's profile, and run once). A case whose strategy
// declares no predictor, or one that does not cover it (data_parallel's clone variant, pipeline
// on two lanes: the simulator models one compute stream per device), or whose predictor needs a
// GPU per device that this machine lacks (ddp on CPU stand-ins), is left out, with a line saying
// so. A case skipped for want of GPUs (on a machine with fewer than it needs, but some) is
// predicted all the same, from its parts profiled sharing the visible GPUs, and marked not run.
// A case its predictor cannot model (a schedule that cannot be built at the case's shape, a cut
// the model cannot make) is reported on its own line and runs unpredicted; the set-up's others
// are still predicted. `left_out`, if given, gets every case of `cases` that is not to run, as
// skipped, with why: one skipped already keeps its reason; "left out by --advise=N: not among the
// N best predicted of its set-up"; "left out by --advise: no predictor covers it on these devices".
std::vector<CaseSpec> advise(const std::vector<CaseSpec>& cases, const Options& options,
                             std::vector<CaseSpec>* left_out = nullptr);

}  // namespace parbench
