// A Hugging Face config.json of a Llama-architecture model, read as a LlamaConfig (--model-config).
#pragma once

#include "models/llama.h"

#include <string>
#include <vector>

namespace parbench {

// The configuration in the file at `path`, named after the file's stem (configs/llama-8b.json:
// llama-8b). Fields parbench does not use are appended to `unused` (by name, in the file's order).
// Throws std::invalid_argument with a one-line reason for a file that cannot be read, is not a
// JSON object, names an architecture other than Llama's (model_type, architectures), lacks a size
// or gives one that is not a whole number of at least 1, whose heads do not divide its width
// (without head_dim) or kv heads its heads, or that asks for what parbench does not model
// (attention or MLP biases, sliding-window attention, mixtures of experts, another activation,
// another rope_scaling than Llama 3.1's, dropout).
LlamaConfig read_llama_config_file(const std::string& path, std::vector<std::string>* unused);

// read_llama_config_file, then register_llama_model: the model's name, or std::invalid_argument
// (a model of that name exists already, for one).
std::string register_llama_config_file(const std::string& path, std::vector<std::string>* unused);

}  // namespace parbench
