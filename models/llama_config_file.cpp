#include "models/llama_config_file.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace parbench {
namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw std::invalid_argument("--model-config=" + path + ": " + why);
}

std::string one_line(std::string text) {
  for (auto& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

std::string stem_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  auto base = slash == std::string::npos ? path : path.substr(slash + 1);
  const auto dot = base.find_last_of('.');
  if (dot != std::string::npos && dot > 0) base = base.substr(0, dot);
  return base;
}

// A field that is present and not null.
bool given(const Json& json, const char* field) { return json.contains(field) && !json.at(field).is_null(); }

int64_t whole_number(const std::string& path, const Json& json, const char* field) {
  if (!given(json, field)) refuse(path, std::string("no ") + field + " (a whole number of at least 1 is needed)");
  const auto& value = json.at(field);
  if (!value.is_number_integer() || value.get<int64_t>() < 1) {
    refuse(path, std::string(field) + " is " + one_line(value.dump()) + " (must be a whole number of at least 1)");
  }
  return value.get<int64_t>();
}

double positive_number(const std::string& path, const Json& json, const char* field, double fallback) {
  if (!given(json, field)) return fallback;
  const auto& value = json.at(field);
  if (!value.is_number() || !(value.get<double>() > 0)) {
    refuse(path, std::string(field) + " is " + one_line(value.dump()) + " (must be a number above 0)");
  }
  return value.get<double>();
}

// A field that turns on something parbench does not model: refused where it is set (true, a
// number other than 0, a non-empty value).
void refuse_if_set(const std::string& path, const Json& json, const char* field, const std::string& what) {
  if (!given(json, field)) return;
  const auto& value = json.at(field);
  const bool set = value.is_boolean()  ? value.get<bool>()
                   : value.is_number() ? value.get<double>() != 0
                   : value.is_string() ? !value.get<std::string>().empty()
                                       : !value.empty();
  if (set) refuse(path, std::string(field) + " is " + one_line(value.dump()) + ": " + what + ", which parbench does not model");
}

}  // namespace

LlamaConfig read_llama_config_file(const std::string& path, std::vector<std::string>* unused) {
  std::ifstream file(path);
  if (!file) refuse(path, std::string("cannot read it: ") + std::strerror(errno));
  std::stringstream text;
  text << file.rdbuf();
  if (file.bad()) refuse(path, std::string("cannot read it: ") + std::strerror(errno));
  Json json;
  try {
    json = Json::parse(text.str());
  } catch (const Json::parse_error& error) {
    refuse(path, "not JSON (" + one_line(error.what()) + ")");
  }
  if (!json.is_object()) refuse(path, "not a JSON object (a Hugging Face config.json is one)");

  // The architecture: a Llama-style decoder.
  const std::string allowed = "model_type 'llama', architectures [\"LlamaForCausalLM\"]";
  if (!given(json, "model_type") && !given(json, "architectures")) {
    refuse(path, "names no architecture (model_type or architectures; parbench reads " + allowed + ")");
  }
  if (given(json, "model_type")) {
    const auto& type = json.at("model_type");
    if (!type.is_string() || type.get<std::string>() != "llama") {
      refuse(path, "model_type " + one_line(type.dump()) + " is not a Llama-style decoder (parbench reads " + allowed + ")");
    }
  }
  if (given(json, "architectures")) {
    const auto& architectures = json.at("architectures");
    bool llama = architectures.is_array() && !architectures.empty();
    if (llama) {
      for (const auto& name : architectures) llama = llama && name.is_string() && name.get<std::string>() == "LlamaForCausalLM";
    }
    if (!llama) {
      refuse(path, "architectures " + one_line(architectures.dump()) + " is not a Llama-style decoder (parbench reads " +
                       allowed + ")");
    }
  }

  // What parbench does not model, named by its field.
  refuse_if_set(path, json, "attention_bias", "biases on q, k, v and o");
  refuse_if_set(path, json, "mlp_bias", "biases in the feed-forward");
  refuse_if_set(path, json, "sliding_window", "sliding-window attention");
  refuse_if_set(path, json, "use_sliding_window", "sliding-window attention");
  for (const char* field : {"num_local_experts", "num_experts", "num_experts_per_tok", "n_routed_experts",
                            "moe_intermediate_size", "n_shared_experts", "router_aux_loss_coef"}) {
    refuse_if_set(path, json, field, "a mixture of experts");
  }
  refuse_if_set(path, json, "attention_dropout", "dropout");
  if (given(json, "hidden_act")) {
    const auto& act = json.at("hidden_act");
    if (!act.is_string() || act.get<std::string>() != "silu") {
      refuse(path, "hidden_act is " + one_line(act.dump()) + ": parbench models SwiGLU, hidden_act \"silu\"");
    }
  }

  LlamaConfig config;
  config.name = stem_of(path);
  if (config.name.empty()) refuse(path, "its file name has no stem to name the model by");
  config.width = whole_number(path, json, "hidden_size");
  config.layers = whole_number(path, json, "num_hidden_layers");
  config.heads = whole_number(path, json, "num_attention_heads");
  // Hugging Face's defaults where a field is absent: as many kv heads as heads, theta 10000,
  // eps 1e-6, an untied head.
  config.kv_heads = given(json, "num_key_value_heads") ? whole_number(path, json, "num_key_value_heads") : config.heads;
  config.ffn = whole_number(path, json, "intermediate_size");
  config.vocabulary = whole_number(path, json, "vocab_size");
  config.context = whole_number(path, json, "max_position_embeddings");
  if (given(json, "head_dim")) config.head_dim = whole_number(path, json, "head_dim");
  config.rope_theta = positive_number(path, json, "rope_theta", 10000.0);
  config.norm_eps = positive_number(path, json, "rms_norm_eps", 1e-6);
  if (given(json, "tie_word_embeddings")) {
    const auto& tied = json.at("tie_word_embeddings");
    if (!tied.is_boolean()) refuse(path, "tie_word_embeddings is " + one_line(tied.dump()) + " (must be true or false)");
    config.tied = tied.get<bool>();
  }
  // transformers 5 writes rope_parameters: the theta, and the scaling's fields beside its rope_type
  // ("default": none).
  const char* scaling_field = given(json, "rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (given(json, "rope_parameters")) {
    const auto& parameters = json.at("rope_parameters");
    if (!parameters.is_object()) refuse(path, "rope_parameters is " + one_line(parameters.dump()) + " (an object or null)");
    config.rope_theta = positive_number(path, parameters, "rope_theta", config.rope_theta);
  }
  const bool default_rope = given(json, "rope_parameters") && json.at("rope_parameters").contains("rope_type") &&
                            json.at("rope_parameters").at("rope_type") == "default";
  if (given(json, scaling_field) && !default_rope) {
    const auto& scaling = json.at(scaling_field);
    if (!scaling.is_object()) {
      refuse(path, std::string(scaling_field) + " is " + one_line(scaling.dump()) + " (an object or null)");
    }
    const auto type_field = scaling.contains("rope_type") ? "rope_type" : "type";
    const auto type = scaling.contains(type_field) ? scaling.at(type_field) : Json();
    if (!type.is_string() || type.get<std::string>() != "llama3") {
      refuse(path, std::string(scaling_field) + "." + type_field + " is " + one_line(type.dump()) +
                       ": parbench models Llama 3.1's \"llama3\" scaling only (or none)");
    }
    Llama3RopeScaling llama3;
    llama3.factor = positive_number(path, scaling, "factor", llama3.factor);
    llama3.low_freq_factor = positive_number(path, scaling, "low_freq_factor", llama3.low_freq_factor);
    llama3.high_freq_factor = positive_number(path, scaling, "high_freq_factor", llama3.high_freq_factor);
    if (scaling.contains("original_max_position_embeddings")) {
      llama3.original_context = whole_number(path, scaling, "original_max_position_embeddings");
    }
    config.rope_scaling = llama3;
  }
  if (config.head_dim == 0 && config.width % config.heads != 0) {
    refuse(path, "num_attention_heads " + std::to_string(config.heads) + " does not divide hidden_size " +
                     std::to_string(config.width) + " (give head_dim, or heads that divide the width)");
  }
  if (config.heads % config.kv_heads != 0) {
    refuse(path, "num_key_value_heads " + std::to_string(config.kv_heads) + " does not divide num_attention_heads " +
                     std::to_string(config.heads) + " (each kv head serves a whole group of query heads)");
  }
  const auto problem = llama_config_problem(config);
  if (!problem.empty()) refuse(path, problem);

  if (unused != nullptr) {
    static const std::set<std::string> read = {
        "model_type", "architectures", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "intermediate_size", "vocab_size", "max_position_embeddings", "head_dim",
        "rope_theta", "rms_norm_eps", "tie_word_embeddings", "rope_scaling", "rope_parameters", "attention_bias", "mlp_bias",
        "sliding_window", "use_sliding_window", "num_local_experts", "num_experts", "num_experts_per_tok",
        "n_routed_experts", "moe_intermediate_size", "n_shared_experts", "router_aux_loss_coef",
        "attention_dropout", "hidden_act"};
    for (const auto& item : json.items()) {
      if (read.count(item.key()) == 0) unused->push_back(item.key());
    }
  }
  return config;
}

std::string register_llama_config_file(const std::string& path, std::vector<std::string>* unused) {
  const auto config = read_llama_config_file(path, unused);
  try {
    register_llama_model(config);
  } catch (const std::invalid_argument& error) {
    refuse(path, std::string(error.what()) + " (the model is named after the file: rename it)");
  }
  return config.name;
}

}  // namespace parbench
