// Models by name.
#pragma once

#include "models/gpt.h"
#include "strategies/strategy.h"

namespace parbench {

// Names accepted by make_model, in a stable order.
std::vector<std::string> model_names();

// A freshly initialised model on the CPU; throws std::invalid_argument for an unknown name.
// A language model ignores num_classes: its vocabulary is its own (fit_config_to_model).
ModelPtr make_model(const std::string& name, int64_t num_classes);

// The GPT configuration of that name, or null: known without building the model.
const GptConfig* find_gpt_config(const std::string& name);

// Whether the model takes token sequences (--seq) rather than images (--image).
bool is_language_model(const std::string& name);

// For a language model: next-token cross-entropy over its vocabulary (the loss and classes a
// run config holds). Image models keep the config's own.
void fit_config_to_model(RunConfig& config);

// Throws std::invalid_argument naming the limit where `model` is a language model whose context
// is shorter than `seq_len` tokens; nothing for an image model.
void check_sequence_length(const std::string& model, int64_t seq_len);

}  // namespace parbench
