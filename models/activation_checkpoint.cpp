#include "models/activation_checkpoint.h"

#include "models/staged_model.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>

namespace parbench {
namespace {

// The block a checkpointed forward recomputes, kept with its autograd node.
struct Recomputation : torch::CustomClassHolder {
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  std::optional<c10::ScalarType> autocast;
};

class CheckpointedBlock : public torch::autograd::Function<CheckpointedBlock> {
 public:
  // Runs without grad (Function::apply's forward does): nothing inside the block is kept.
  static torch::Tensor forward(torch::autograd::AutogradContext* context, const torch::Tensor& input,
                               const c10::intrusive_ptr<Recomputation>& block) {
    context->save_for_backward({input});
    context->saved_data["block"] = c10::IValue::make_capsule(block);
    return block->forward(input);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* context,
                                                 torch::autograd::variable_list output_gradients) {
    const auto input = context->get_saved_variables().front();
    const auto block = c10::static_intrusive_pointer_cast<Recomputation>(context->saved_data["block"].toCapsule());
    // checkpointed_forward applies it only to an input that needs a gradient.
    const auto recompute_input = input.detach().requires_grad_();
    torch::Tensor output;
    {
      torch::AutoGradMode with_grad(true);
      AutocastScope autocast(recompute_input.device().type(), block->autocast);
      output = block->forward(recompute_input);
    }
    torch::autograd::backward({output}, {output_gradients.front()});
    // One gradient per forward argument: the block itself has none.
    return {recompute_input.grad(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpointed_forward(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                                   const torch::Tensor& input) {
  if (!torch::GradMode::is_enabled() || !input.requires_grad()) return forward(input);
  auto block = c10::make_intrusive<Recomputation>();
  block->forward = forward;
  // Read now, not when the model's stages were made: a strategy may set the model's autocast
  // after (a pipeline's parts did), and a recomputation in fp32 of a bf16 forward is both slower
  // and not the forward the gradients belong to.
  const auto device_type = input.device().type();
  if (at::autocast::is_autocast_enabled(device_type)) block->autocast = at::autocast::get_autocast_dtype(device_type);
  return CheckpointedBlock::apply(input, block);
}

}  // namespace parbench
