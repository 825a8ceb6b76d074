#include "strategies/stage_timing.h"

#include "core/device_timer.h"
#include "strategies/training.h"

namespace parbench {

std::vector<double> measure_stage_seconds(StagedModel& model, const RunConfig& config, int64_t batch_size,
                                          torch::Device device) {
  constexpr int kRepeats = 3;  // the median of three, after one warm-up pass
  // On a copy, so the measurement leaves the model's batch-norm statistics as they were.
  auto copy = std::dynamic_pointer_cast<StagedModel>(model.module().clone(device));
  prepare_model(*copy, config.precision);
  auto stages = copy->stages();
  auto x = make_random_batch(config, batch_size, device, device).inputs;
  std::vector<double> seconds;
  for (auto& stage : stages) {
    // A language model's first stage takes token ids, which have no gradient.
    auto input = x.is_floating_point() ? x.detach().requires_grad_() : x;
    torch::Tensor output;
    seconds.push_back(median_synchronised_seconds({device}, kRepeats, [&] {
      {
        AutocastScope autocast(device.type(), copy->autocast_dtype());
        output = stage.forward(input);
      }
      output.backward(torch::ones_like(output));
    }));
    x = output.detach();
  }
  return seconds;
}

}  // namespace parbench
