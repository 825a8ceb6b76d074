#include "strategies/stage_timing.h"

#include "core/device_timer.h"
#include "strategies/training.h"

#include <map>
#include <mutex>
#include <string>

namespace parbench {

std::vector<double> measure_stage_seconds(StagedModel& model, const RunConfig& config, int64_t batch_size,
                                          torch::Device device) {
  constexpr int kRepeats = 5;  // the median of five, after two warm-up passes
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
    const auto forward_and_backward = [&] {
      {
        AutocastScope autocast(device.type(), copy->autocast_dtype());
        output = stage.forward(input);
      }
      output.backward(torch::ones_like(output));
    };
    forward_and_backward();  // a second warm-up pass (median_synchronised_seconds runs one)
    seconds.push_back(median_synchronised_seconds({device}, kRepeats, forward_and_backward));
    x = output.detach();
  }
  return seconds;
}

std::vector<double> stage_seconds_once(StagedModel& model, const RunConfig& config, int64_t batch_size,
                                       torch::Device device) {
  static std::mutex mutex;
  static std::map<std::string, std::vector<double>> measured;
  const std::string key = model.name() + "/classes:" + std::to_string(config.num_classes) +
                          "/image:" + std::to_string(config.image_size) + "/seq:" + std::to_string(config.seq_len) +
                          "/precision:" + std::to_string(static_cast<int>(config.precision)) +
                          "/checkpoint:" + std::to_string(static_cast<int>(config.checkpoint)) +
                          "/loss:" + std::to_string(static_cast<int>(config.loss)) +
                          "/batch:" + std::to_string(batch_size) + "/device:" + device.str();
  std::lock_guard<std::mutex> lock(mutex);
  const auto found = measured.find(key);
  if (found != measured.end()) return found->second;
  return measured[key] = measure_stage_seconds(model, config, batch_size, device);
}

}  // namespace parbench
