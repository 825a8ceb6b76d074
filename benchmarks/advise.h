// parbench --advise: predicts, from a short profile, the step time of the cases whose strategy
// declares a model for them (StrategyInfo::advise_model and advised: single, model_parallel,
// pipeline on one lane, data_parallel's broadcast variant, and ddp where it has a GPU per rank),
// ranks each set-up's cases, and runs the whole-model reference (single) and the best predicted
// ones to check the predictions; the others are left out, with a line saying how many.
//
// The profile, per set-up (model, batch, image, precision, data), on the devices the
// multi-device cases use: single's step; and, for the cut model_parallel and pipeline use, each
// part's forward and backward (the loss included on the last part) and the copy of its output
// to the next device, at micro-batches of 1, 2, 4, ... images, data_parallel's shard and the
// whole batch, and each part's SGD update; for zb-h1, each part's backward split as the executor
// splits it, the input gradient (B) and then the weight gradients (W); for interleaved-1f1b with
// v chunks per device, the same pieces of its v x devices parts, placed round-robin as the
// executor places them; data_parallel's broadcast and reduction; for ddp,
// single's step at the per-rank batch, each stage's backward there and each gradient bucket's
// all-reduce across the ranks' GPUs. Each is the median of 5 synchronised runs after an untimed one: replays of
// the piece captured in a CUDA graph for --cuda-graph=on cases on GPUs, else eager runs (which
// on GPUs include the host's dispatch, as the eager steps they predict do).
// The prediction: single's profiled step; model_parallel and pipeline (every schedule, on one
// lane) from the schedule simulator (strategies/schedule_simulator.h), their micro-batches'
// times interpolated linearly between the profiled sizes; data_parallel from its broadcast, the
// replicas' forwards and backwards side by side (the whole model at its shard), its reduction
// and update; ddp from single's step at the per-rank batch plus the all-reduce time that
// backward does not hide.
// docs/METRICS.md ("Predicted step time") has the model.
#pragma once

#include "benchmarks/cases.h"
#include "strategies/schedule_simulator.h"

#include <map>
#include <optional>
#include <set>
#include <utility>

namespace parbench {

// ddp's pieces for one bucket size and per-rank batch, in milliseconds.
struct DdpProfile {
  double rank_step_ms = 0;  // single's step at the per-rank batch
  double backward_ms = 0;   // the model's backward there, the loss's included
  std::vector<double> bucket_ready_ms;      // per bucket, in starting order: when its gradients are ready, from backward's start
  std::vector<double> bucket_allreduce_ms;  // per bucket: its all-reduce across the ranks' GPUs
};

// One cut's pieces, in milliseconds: per part and per profiled micro-batch size (the profile's
// `sizes`), forward, backward (the loss included on the last part), and the copy of the part's
// output to the next part's device; per part, its SGD update.
struct CutProfile {
  std::string cut;  // format_cut's; empty where the cut was not profiled
  std::vector<std::vector<double>> forward_ms, backward_ms, copy_ms;
  // zb-h1's halves of each backward, as the executor runs them: B, the input gradient (with the
  // loss on the last part; nothing on the first, which has no input gradient), and W, the weight
  // gradients through the graph B kept. Empty unless asked for.
  std::vector<std::vector<double>> input_gradient_ms, weight_gradient_ms;
  std::vector<double> update_ms;
};

// What one set-up's profile measured, in milliseconds.
struct AdviseProfile {
  double single_step_ms = 0;
  std::vector<int64_t> sizes;  // the micro-batch sizes every cut was profiled at
  CutProfile parts;            // one part per device: model_parallel, pipeline, data_parallel
  std::map<int, CutProfile> chunked;  // interleaved-1f1b, by chunks per device: chunks x devices parts
  double broadcast_ms = 0, reduce_ms = 0;  // data_parallel's (docs/METRICS.md)
  std::map<std::pair<double, int64_t>, DdpProfile> ddp;  // by (bucket MiB, per-rank batch)
  bool graphed = false;  // every piece captured in a CUDA graph and replayed
};

// What a set-up's cases need profiled beyond single's step.
struct ProfileRequest {
  bool parts = false;                    // the one-chunk cut's parts (staged and replicated strategies)
  bool backward_halves = false;          // and their backwards' halves (zb-h1)
  std::set<int> chunks;                  // interleaved-1f1b's chunks per device (above 1), a cut for each
  const CaseSpec* replicated = nullptr;  // a replicated strategy's case: its broadcast and reduction
  std::vector<std::pair<double, int64_t>> ddp;  // (bucket MiB, per-rank batch) of each ddp case
};

// Profiles `spec`'s set-up (spec.config.batch_size: the set-up's whole batch): single's step on
// the first of `devices` and, given more than one device (they may repeat one GPU), what
// `request` asks for on them; ddp's all-reduces need distinct GPUs. A chunk count whose cut the
// model cannot make (more parts than it has stages) is left out of `chunked`.
AdviseProfile profile_setup(const CaseSpec& spec, const std::vector<torch::Device>& devices, bool graphed,
                            const ProfileRequest& request);

// The schedule simulator's step for one model_parallel or pipeline case as advise predicts it
// (its parts profiled on the case's devices, eager or graphed as the case runs), with every
// action placed; nullopt for a case advise does not model (see advise()).
std::optional<SimulatedStep> predict_staged_case(const CaseSpec& spec);

// Profiles and predicts every set-up of `cases`, prints the ranked predictions, records them in
// the run's context (advise_predictions, advise_profile_s) and returns the cases to run: per
// set-up single and the `options.advise_validate` best predicted (all of them for
// kValidateAll), each carrying its prediction. A set-up is a global batch: ddp's strong-scaling
// cases join the others', its weak-scaling ones make their own. In a scaling run (--gpus=LIST)
// whose set-up has multi-device cases at several counts, each count is a set-up of its own:
// profiled on its devices, ranked and validated apart, with single's case in each ranking (its
// prediction recorded from the first count's profile, and run once). ddp without GPUs for its ranks,
// data_parallel's clone variant and pipeline cases on two lanes (the simulator models one compute
// stream per device) are not modelled: they are left out, with a line saying so. A case skipped
// for want of GPUs (on a machine with fewer than it needs, but some) is predicted all the same,
// from its parts profiled sharing the visible GPUs, and marked not run. A pipeline case whose
// schedule cannot be built where advise models it (make_schedule refuses its devices,
// micro-batches or chunks) is reported on its own line and runs unpredicted; the others are
// still predicted.
std::vector<CaseSpec> advise(const std::vector<CaseSpec>& cases, const Options& options);

}  // namespace parbench
