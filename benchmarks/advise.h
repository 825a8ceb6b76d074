// parbench --advise: predicts the step time of every single, model_parallel and pipeline case
// from a short profile, ranks them, and runs the best predicted ones to check the prediction.
//
// The profile, per set-up (model, batch, image, precision, data), on the devices the
// multi-device cases use: single's step; and, for the cut model_parallel and pipeline use, each
// part's forward and backward (the loss included on the last part) and the copy of its output
// to the next device, at micro-batches of 1, 2, 4, ... images and the whole batch, and each
// part's SGD update. Each is the median of 5 synchronised runs after an untimed one (eager: on
// GPUs that includes the host's dispatch, as the eager steps it predicts do).
// The prediction: single's profiled step; model_parallel and pipeline from the schedule
// simulator (strategies/schedule_simulator.h), their micro-batches' times interpolated linearly
// between the profiled sizes. docs/METRICS.md ("Predicted step time") has the model.
#pragma once

#include "benchmarks/cases.h"

namespace parbench {

// Profiles and predicts every set-up of `cases`, prints the ranked predictions, records them in
// the run's context (advise_predictions, advise_profile_s) and returns the cases to run: per
// set-up single and the `options.advise_validate` best predicted (all of them for
// kValidateAll), each carrying its prediction. Cases of other strategies, and pipeline cases on
// two lanes, are not modelled: they are left out, with a line saying so.
std::vector<CaseSpec> advise(const std::vector<CaseSpec>& cases, const Options& options);

}  // namespace parbench
