// Activation checkpointing: a block's forward that keeps only its input, and runs the forward
// again in the backward to get what the backward needs (docs/STRATEGIES.md, "Activation
// checkpointing"). What --checkpoint=blocks does to every residual or transformer block.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>

namespace parbench {

// `forward(input)`, its activations freed as it returns; the backward re-runs `forward` on the
// kept input, with grad and under the autocast state this forward ran under (the backward may run
// on another thread, whose autocast state is its own, as PyTorch's checkpoint records it), then
// back-propagates through it: the block's parameters get their gradients there, and the input
// its gradient.
//
// The recomputation runs the block's whole backward at once, as PyTorch's reentrant checkpoint
// does: a backward that asks for the input's gradient alone (zero-bubble's B step) would get the
// weights' too, so strategies that split the backward refuse checkpointing.
// Without grad mode, or on an input that needs no gradient (the model's own input), it is
// `forward(input)`, kept: the block's weights get their gradients only through a node that
// takes a tensor needing one.
torch::Tensor checkpointed_forward(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                                   const torch::Tensor& input);

}  // namespace parbench
